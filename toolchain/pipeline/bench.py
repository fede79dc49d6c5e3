"""`toolchain bench`: load-test a deployment and put the planner's TPOT floor for its cell beside the result."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from toolchain.artifacts.bench_result import BenchResult, Planner
from toolchain.bench.options import BenchOptions
from toolchain.bench.run import assess as assess_run
from toolchain.bench.run import run_bench, save
from toolchain.bench.search import assess_search
from toolchain.bench.setup import make_config
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.progress import Heartbeat, Progress, silent
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.matrix import Cell


def planner_floor(cell: Cell, plan: CellPlan | None = None) -> Planner:
    """The ``planner`` section of a result: the cell's TPOT floor at batch 1 on its GPU."""
    plan = plan or plan_cell(cell, arch_for_spec(cell.spec))
    return Planner(tpot_floor_b1_ms=plan.tpot_floor_b1_ms, gpu=cell.gpu.name)


def with_planner(result: BenchResult, planner: Planner) -> BenchResult:
    """The result with its ``planner`` section (set, so the saved document holds it)."""
    return result.model_copy(update={"planner": planner})


def run_benchmark(opts: BenchOptions, *, save_to: Path | None = None, progress: Progress = silent) -> BenchResult:
    """Build the load test ``opts`` describe (``toolchain.bench.setup.make_config``), run it — the SLO search
    (toolchain.bench.search) when ``opts.slo_search`` is set, else the fixed load points — add the planner floor
    when a spec names the cell, and save the result when asked (partial results included).

    The SLO flags (``opts.slo_ttft_ms``, ``slo_tpot_ms``, ``slo_goodput``) override the spec's SLOs.
    """
    from toolchain.bench import search as S

    progress("preparing the load: tokenizer, prompts, connection")
    with Heartbeat(progress, "preparing the load"):
        work, cell = make_config(opts)
    slo = opts.slo_flags
    plan = opts.search_plan
    targets = (
        S.make_targets(work.slo, slo["ttft_ms"], slo["tpot_ms"], slo["goodput"])
        if (plan is not None or any(v is not None for v in slo.values()))
        else None
    )
    if plan is not None and targets is not None:
        result = S.run_search(opts, work, plan, targets, progress=progress)
    else:
        if targets is not None:
            work = replace(work, slo=targets.per_request())
        result = run_bench(opts, work, progress=progress)
    if cell is not None:
        result = with_planner(result, planner_floor(cell))
    if save_to is not None:
        save(result, save_to)
    return result


def assess(result: BenchResult) -> tuple[int, str | None]:
    """Exit code and reason of a bench result: an SLO search by its own rule (a probe that fails is an answer),
    any other run by ``toolchain.bench.run.assess``."""
    return assess_search(result) if result.search is not None else assess_run(result)
