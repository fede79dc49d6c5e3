"""The one table that says which spec fields are build fields and which are runtime fields."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from toolchain.specs.loader import _unwrap
from toolchain.specs.models import EngineSpec


@cache
def field_table() -> dict[str, str]:
    """Dotted path of every leaf spec field -> its scope ('build', 'runtime' or 'plan')."""
    table: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            path = f"{prefix}{name}"
            inner = _unwrap(f.annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                walk(inner, path + ".")
                continue
            extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
            scope = extra.get("scope")
            if scope not in ("build", "runtime", "plan"):
                raise AssertionError(f"spec field {path} declares no scope")
            table[path] = str(scope)

    walk(EngineSpec, "")
    return table


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part)
    return obj


def values_in_scope(spec: EngineSpec, scope: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every field of one scope with its value (JSON-ready), by dotted path."""
    out: dict[str, Any] = {}
    for path, s in field_table().items():
        if s != scope or path.startswith(skip):
            continue
        parent = path.rpartition(".")[0]
        if parent and get_path(spec, parent) is None:
            continue  # a field of an optional block that is not set is not part of any identity
        out[path] = get_path(spec, path)
    return out
