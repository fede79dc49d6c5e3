"""The Dynamo commands' stages: spec → cell → plan → (deployment files | a local run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolchain.dynamo.plan import DynamoPlan, plan_dynamo
from toolchain.errors import SpecError, UserInputError
from toolchain.progress import Progress, silent
from toolchain.specs.arch import ModelArch
from toolchain.specs.matrix import Cell


@dataclass
class Planned:
    cell: Cell
    arch: ModelArch
    plan: DynamoPlan


def plan_spec(spec_path: Path, cell_id: str | None = None, *, mode: str | None = None) -> Planned:
    """Load, validate (every `spec validate` rule) and plan the spec's Dynamo deployment for one cell."""
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.matrix import expand, find_cell
    from toolchain.specs.rules import require_compatible

    spec = checked_spec(spec_path)  # the rules `spec validate` applies (specs.gate)
    if spec.dynamo is None:
        raise SpecError(
            "the spec has no dynamo block", file=spec_path, hint="add `dynamo: {mode: disaggregated}` (docs/dynamo.md)"
        )
    if mode is not None and mode != spec.dynamo.mode:
        spec = spec.model_copy(update={"dynamo": spec.dynamo.model_copy(update={"mode": mode})}).with_base_dir(
            spec.base_dir
        )
    cell = find_cell(spec, cell_id) if cell_id else expand(spec)[0]
    require_compatible(spec, [cell])
    arch = arch_for_spec(spec)
    return Planned(cell, arch, plan_dynamo(cell, arch))


def up(
    spec_path: Path,
    *,
    cell_id: str | None = None,
    mode: str | None = None,
    workdir: Path | None = None,
    http_port: int | None = None,
    speedup: float | None = None,
    ready_timeout: float = 120.0,
    progress: Progress = silent,
) -> tuple[Planned, object]:
    """Plan the spec and bring its topology up here with the Dynamo mocker; returns the plan and the
    running LocalDeployment (the caller stops it). ``workdir`` defaults to a new run directory under
    ``$TOOLCHAIN_CACHE/dynamo/``, where the logs outlive the run."""
    from toolchain.artifacts.layout import cache
    from toolchain.dynamo.card import write_card
    from toolchain.dynamo.env import dynamo_python
    from toolchain.dynamo.local import start_local

    if speedup is not None and not speedup > 0:  # also NaN
        raise UserInputError(f"--speedup must be a positive number, not {speedup}", "e.g. --speedup 10")
    planned = plan_spec(spec_path, cell_id, mode=mode)  # the spec's mistakes first, then the environment's
    python = dynamo_python()
    if workdir is None:
        workdir = cache().dynamo_run(planned.cell.spec.name)
    workdir.mkdir(parents=True, exist_ok=True)
    progress("writing the stand-in model card (tokenizer + the model's shape)")
    card = write_card(workdir / "model", planned.arch, planned.cell.spec.name)
    dep = start_local(
        planned.cell,
        planned.plan,
        card,
        workdir=workdir,
        python=python,
        http_port=http_port,
        speedup=speedup,
        ready_timeout=ready_timeout,
        progress=progress,
    )
    return planned, dep
