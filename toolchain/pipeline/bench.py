"""`toolchain bench`: load-test a deployment and put the planner's TPOT floor for its cell beside the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.bench.result import build_document
from toolchain.bench.run import run_bench, save
from toolchain.bench.setup import make_config
from toolchain.errors import UserInputError
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.progress import Heartbeat, Progress, silent
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.matrix import Cell


def planner_floor(cell: Cell, plan: CellPlan | None = None) -> dict[str, Any]:
    """The ``planner`` section of a result: the cell's TPOT floor at batch 1 on its GPU."""
    plan = plan or plan_cell(cell, arch_for_spec(cell.spec))
    return {"tpot_floor_b1_ms": plan.tpot_floor_b1_ms, "gpu": cell.gpu.name}


def run_benchmark(
    *,
    save_to: Path | None = None,
    progress: Progress = silent,
    search: dict[str, Any] | None = None,
    slo: dict[str, float | None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Build the load test from ``options`` (see ``toolchain.bench.setup.make_config``), run it, add the
    planner floor when a spec names the cell, and save the result when asked (partial results included).

    ``slo`` (ttft_ms, tpot_ms, goodput) overrides the spec's SLOs; ``search`` (mode, start, limit,
    tolerance, max_probes) runs the SLO search (toolchain.bench.search) instead of the fixed load points.
    """
    from toolchain.bench import search as S

    slo = slo or {}
    S.check_slo_flags(slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("goodput"))
    plan = None
    if search is not None and search.get("mode") is not None:
        if options.get("concurrency") or options.get("rate") or options.get("trace"):
            raise UserInputError(
                "--slo-search chooses its own load points; --concurrency, --rate and --trace do not combine with it",
                "drop them, or drop --slo-search (--slo-start and --slo-max bound the search)",
            )
        plan = S.make_plan(
            search["mode"],
            start=search.get("start"),
            limit=search.get("limit"),
            tolerance=search.get("tolerance"),
            max_probes=search.get("max_probes"),
            poisson=bool(options.get("poisson")),
            duration_s=options.get("duration"),
        )
    elif search and any(v is not None for k, v in search.items() if k != "mode"):
        raise UserInputError(
            "--slo-start, --slo-max, --slo-tolerance and --slo-max-probes shape an --slo-search",
            "add --slo-search concurrency|rate, or drop them",
        )
    progress("preparing the load: tokenizer, prompts, connection")
    with Heartbeat(progress, "preparing the load"):
        cfg, cell = make_config(**options)
    targets = (
        S.make_targets(cfg.slo, slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("goodput"))
        if (plan is not None or any(v is not None for v in slo.values()))
        else None
    )
    if plan is not None and targets is not None:
        result = S.run_search(cfg, plan, targets, progress=progress)
    else:
        if targets is not None:
            cfg.slo = targets.per_request()
        result = run_bench(cfg, progress=progress)
    if cell is not None:
        result = build_document({**result, "planner": planner_floor(cell)})
    if save_to is not None:
        save(result, save_to)
    return result
