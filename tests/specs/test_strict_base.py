"""Every model of an engine spec shares one strict base: unknown keys refused, frozen, defaults validated, and no
inf or nan in any float (a copy of the base that forgot ``allow_inf_nan=False`` once let `.inf` through)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from pydantic import BaseModel

import toolchain.specs


def _spec_models() -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(toolchain.specs.__path__):
        mod = importlib.import_module(f"toolchain.specs.{info.name}")
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == mod.__name__:
                found[f"{mod.__name__}.{name}"] = obj
    return list(found.values())


def test_every_spec_model_is_strict() -> None:
    models = _spec_models()
    assert len(models) >= 20  # the checker sees the spec's models (EngineSpec, its sections, dynamo, lora, ...)
    for m in models:
        cfg = m.model_config
        assert cfg.get("extra") == "forbid", m
        assert cfg.get("frozen") is True, m
        assert cfg.get("validate_default") is True, m
        assert cfg.get("allow_inf_nan") is False, m
