"""The path for models larger than one GPU, exercised on CPU with a small model: loading through a
device map (module -> device, as Accelerate places a model over several GPUs), calibrating where the
modules lie, inputs sent to the embedding's device, the streamed accuracy check on that device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.artifacts.recipe import Recipe
from toolchain.quantize.run import quantize

pytestmark = pytest.mark.slow
FAST: dict[str, Any] = {"samples": 8, "seq_len": 32, "batch_size": 4}
SPREAD = {
    "model.embed_tokens": "cpu",
    "model.layers": "cpu",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}


def test_device_map_gives_the_same_checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> None:
    plain = quantize(tiny_checkpoint, Recipe("int4_awq", "fp8", **FAST), tmp_path / "plain").manifest
    mapped = quantize(tiny_checkpoint, Recipe("int4_awq", "fp8", **FAST), tmp_path / "mapped", device_map=SPREAD)
    files = {k: v for k, v in plain["files"].items() if k.endswith(".safetensors")}
    assert files and files == {k: v for k, v in mapped.manifest["files"].items() if k.endswith(".safetensors")}
    assert mapped.manifest["accuracy"] == plain["accuracy"]
    hf_cfg = json.loads((tmp_path / "mapped" / "hf" / "hf_quant_config.json").read_text())
    assert hf_cfg["quantization"]["quant_algo"] == "W4A16_AWQ"


def test_device_map_needs_cuda_and_a_known_strategy(cli: Cli, tiny_checkpoint: Path, tmp_path: Path) -> None:
    r = cli(
        "quantize", "--checkpoint", tiny_checkpoint, "--weights", "fp8", "--out", tmp_path / "o", "--device-map", "auto"
    )
    assert r.exit_code == 2 and "--device cuda" in r.output and not (tmp_path / "o").exists()
    from toolchain.errors import UserInputError

    with pytest.raises(UserInputError, match="unknown device map 'everywhere'"):
        quantize(tiny_checkpoint, Recipe("fp8", **FAST), tmp_path / "o", device_map="everywhere")
