"""The leaf every spec module builds on: the strict model base, the field scopes, and ``Problem``.

Each leaf field of a spec declares a *scope* in its ``json_schema_extra`` (``toolchain.specs.models`` explains them).
Nothing here imports another spec module, so the feature modules (dynamo, lora, speculative, cuda_graphs) and the
rules that gather their problems meet here instead of importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

JsonDict = dict[str, Any]  # json_schema_extra of a field (pydantic.json_schema.JsonDict)

BUILD: JsonDict = {"scope": "build"}
RUNTIME: JsonDict = {"scope": "runtime"}
PLAN: JsonDict = {"scope": "plan"}


class Strict(BaseModel):
    """Every spec model: unknown keys refused, immutable, defaults validated, no inf or nan in any float."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Problem:
    """One thing `spec validate` refuses: where (a cell, or the whole spec), what is wrong and why, what to change."""

    cell: str | None
    message: str  # what is wrong and why
    fix: str  # what to change

    def line(self) -> str:
        where = f"cell {self.cell}: " if self.cell else ""
        return f"{where}{self.message} — {self.fix}"
