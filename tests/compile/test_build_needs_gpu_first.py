"""Issue 49: `build` on a CPU machine sent the user to quantize an 8B model on that CPU ("run `toolchain quantize`
on the spec first") and only afterwards said the engine needs a GPU host. A cell that needs a GPU here (an engine:
runtime tensorrt) is refused for that first, exit 4, before any quantized checkpoint is asked for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.artifacts.cell import for_cell
from toolchain.compile.engine import build_cell
from toolchain.errors import NeedsGPUError
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand


@pytest.fixture
def no_trtllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without trtllm-build: a CPU machine."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")
    assert shutil.which("trtllm-build") is None


def _unquantized_spec(tmp_path: Path, ckpt: Path) -> Path:
    """tiny-engine.yaml (FP8, runtime tensorrt) whose quantized checkpoint was never made."""
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    out = tmp_path / "tiny-cpu.yaml"
    out.write_text(yaml.safe_dump(d))
    return out


def test_an_engine_on_a_cpu_machine_needs_a_gpu_before_a_quantized_checkpoint(
    no_trtllm: None, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    cell = expand(load_spec(_unquantized_spec(tmp_path, tiny_checkpoint)))[0]
    art = for_cell(cell)
    assert not art.quantized_dir.exists()
    with pytest.raises(NeedsGPUError) as e:
        build_cell(art, open_registry(str(tmp_path / "reg")))
    assert e.value.exit_code == 4 and "toolchain quantize" not in e.value.message + e.value.hint


def test_the_command_exits_4_naming_the_gpu_not_quantize(
    no_trtllm: None, tiny_checkpoint: Path, tmp_path: Path, cli: Cli
) -> None:
    spec = _unquantized_spec(tmp_path, tiny_checkpoint)
    cell = expand(load_spec(spec))[0]
    r = cli("build", spec, "--cell", cell.id, "--registry", tmp_path / "reg")
    assert r.exit_code == 4, r.output
    error = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(error) == 1 and "GPU host" in error[0] and "toolchain quantize" not in error[0], r.output
