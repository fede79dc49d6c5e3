"""`toolchain plan`: every cell of a spec planned against the spec's model."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolchain.planning import estimate
from toolchain.planning.estimate import Estimator
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.specs.arch import ModelArch, arch_for_spec, unknown_fields
from toolchain.specs.matrix import Cell, expand, find_cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import require_compatible


@dataclass
class SpecPlan:
    spec: EngineSpec
    arch: ModelArch
    plans: list[CellPlan]
    unused_config_fields: list[str]  # config.json fields the planner does not use (they may matter)
    notes: list[str] = field(default_factory=list)  # spec-wide notes (e.g. no silicon estimate installed)

    @property
    def errors(self) -> list[tuple[str, str]]:
        """(cell id, problem) for every cell that does not fit."""
        return [(p.cell_id, e) for p in self.plans for e in p.errors]

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name,
            "model": self.arch.name,
            "params": self.arch.params,
            "cells": [p.to_json() for p in self.plans],
            "notes": self.notes,
        }


def plan_spec(
    spec: EngineSpec,
    cell_id: str | None = None,
    *,
    estimator: Estimator = "floor",
    progress: Callable[[str], None] | None = None,
) -> SpecPlan:
    """Plan one cell (``cell_id``) or every cell of ``spec``: the roofline floor, and with ``estimator`` "aic" or
    "auto" NVIDIA AIConfigurator's silicon estimate beside it ("auto": when its venv is installed, else a note)."""
    arch = arch_for_spec(spec)
    local = spec.local_source()
    unused: list[str] = []
    if local is not None and (local / "config.json").is_file():
        unused = unknown_fields(json.loads((local / "config.json").read_text()))
    cells = [find_cell(spec, cell_id)] if cell_id else expand(spec)
    require_compatible(spec, cells)
    sp = SpecPlan(spec, arch, [plan_cell(c, arch) for c in cells], unused)
    if estimator != "floor":
        _estimate(sp, cells, estimator, progress)
    return sp


def _estimate(sp: SpecPlan, cells: list[Cell], estimator: Estimator, progress: Callable[[str], None] | None) -> None:
    """Add the silicon estimate to every plan, or say on each why there is none."""
    session = estimate.open_session(sp.spec, sp.arch, estimator, progress)
    if session is None:
        for plan in sp.plans:
            plan.no_estimate = estimate.missing_message()
        sp.notes.append(
            f"{estimate.missing_message()}: every figure is the roofline floor only (install it: scripts/setup-aic.sh)"
        )
        return
    try:
        for plan, cell in zip(sp.plans, cells, strict=True):
            estimate.apply_estimate(plan, cell, sp.arch, session, strict=estimator == "aic")
    finally:
        session.close()
