"""`toolchain plan`: every cell of a spec planned against the spec's model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.specs.arch import ModelArch, arch_for_spec, unknown_fields
from toolchain.specs.matrix import expand, find_cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import require_compatible


@dataclass
class SpecPlan:
    spec: EngineSpec
    arch: ModelArch
    plans: list[CellPlan]
    unused_config_fields: list[str]  # config.json fields the planner does not use (they may matter)

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
        }


def plan_spec(spec: EngineSpec, cell_id: str | None = None) -> SpecPlan:
    """Plan one cell (``cell_id``) or every cell of ``spec``."""
    arch = arch_for_spec(spec)
    local = spec.local_source()
    unused: list[str] = []
    if local is not None and (local / "config.json").is_file():
        unused = unknown_fields(json.loads((local / "config.json").read_text()))
    cells = [find_cell(spec, cell_id)] if cell_id else expand(spec)
    require_compatible(spec, cells)
    return SpecPlan(spec, arch, [plan_cell(c, arch) for c in cells], unused)
