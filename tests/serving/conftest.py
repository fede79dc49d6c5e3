"""A tiny spec + quantized checkpoint + emitted repository, shared by the Triton tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_tiny_spec as write_tiny_spec_at


def write_tiny_spec(dest: Path, ckpt: Path, **serving: Any) -> Path:
    return write_tiny_spec_at(dest, ckpt, calibration={"samples": 8, "seq_len": 32}, **serving)


@pytest.fixture(scope="session")
def tiny_spec(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_spec(tmp_path_factory.mktemp("spec") / "tiny.yaml", tiny_checkpoint)


@pytest.fixture(scope="session")
def reference_repo(tiny_spec: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand
    from toolchain.triton.repository import emit_for_cell

    cell = expand(load_spec(tiny_spec))[0]
    out = tmp_path_factory.mktemp("repo") / "repo"
    emit_for_cell(for_cell(cell), "reference", out)
    return out
