"""Dynamo fixtures: the shipped disaggregated spec, variants of it, and Dynamo's own interpreter."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
DATA = Path(__file__).resolve().parent / "data"


def dynamo_python_or_fail() -> str:
    """NVIDIA Dynamo's interpreter; missing, the test fails like a missing validator (CI must not pass without it)."""
    from toolchain.dynamo.env import dynamo_python
    from toolchain.errors import DynamoMissingError

    try:
        return dynamo_python()
    except DynamoMissingError as e:
        pytest.fail(f"{e.message} — run scripts/setup.sh (it runs scripts/setup-dynamo.sh)")


@pytest.fixture(scope="session")
def dynamo_py() -> str:
    return dynamo_python_or_fail()


def _deep_update(d: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        elif isinstance(v, dict) and isinstance(d.get(k), dict):
            _deep_update(d[k], v)
        else:
            d[k] = v
    return d


@pytest.fixture
def spec_variant(tmp_path: Path) -> Callable[..., Path]:
    """The shipped disaggregated spec with nested changes (a None value removes the key), written to tmp."""

    def make(changes: dict[str, Any] | None = None, name: str = "spec.yaml") -> Path:
        d = _deep_update(yaml.safe_load(DISAGG.read_text()), changes or {})
        out = tmp_path / name
        out.write_text(yaml.safe_dump(d, sort_keys=False))
        return out

    return make


__all__ = ["DATA", "DISAGG", "REPO", "dynamo_python_or_fail"]
