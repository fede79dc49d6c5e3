"""`toolchain bench`: load-test a deployment and put the planner's TPOT floor for its cell beside the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.bench.run import run_bench, save
from toolchain.bench.setup import make_config
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.progress import Heartbeat, Progress, silent
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.matrix import Cell


def planner_floor(cell: Cell, plan: CellPlan | None = None) -> dict[str, Any]:
    """The ``planner`` section of a result: the cell's TPOT floor at batch 1 on its GPU."""
    plan = plan or plan_cell(cell, arch_for_spec(cell.spec))
    return {"tpot_floor_b1_ms": plan.tpot_floor_b1_ms, "gpu": cell.gpu.name}


def run_benchmark(*, save_to: Path | None = None, progress: Progress = silent, **options: Any) -> dict[str, Any]:
    """Build the load test from ``options`` (see ``toolchain.bench.setup.make_config``), run it, add the
    planner floor when a spec names the cell, and save the result when asked (partial results included)."""
    progress("preparing the load: tokenizer, prompts, connection")
    with Heartbeat(progress, "preparing the load"):
        cfg, cell = make_config(**options)
    result = run_bench(cfg, progress=progress)
    if cell is not None:
        result["planner"] = planner_floor(cell)
    if save_to is not None:
        save(result, save_to)
    return result
