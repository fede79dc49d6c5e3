"""Real ModelOpt on CPU: every format × KV option, both exports, determinism, accuracy gate, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.artifacts.quantized import QUANT_ALGO, verify_output
from toolchain.artifacts.recipe import Recipe
from toolchain.errors import (
    AccuracyGateError,
    CheckpointError,
    NeedsGPUError,
    OutputExistsError,
    UserInputError,
)
from toolchain.quantize.run import quantize

pytestmark = pytest.mark.slow
FAST: dict[str, Any] = {"samples": 8, "seq_len": 32, "batch_size": 4}


@pytest.mark.parametrize("kv", ["none", "fp8"])
@pytest.mark.parametrize("fmt", ["fp8", "int4_awq", "w4a8_awq", "int8_sq", "int8_wo", "nvfp4"])
def test_format_exports_both_checkpoints(tiny_checkpoint: Path, tmp_path: Path, fmt: str, kv: str) -> None:
    res = quantize(tiny_checkpoint, Recipe(fmt, kv, **FAST), tmp_path / "out")
    out = res.out
    trt = json.loads((out / "trtllm" / "config.json").read_text())
    q = trt["quantization"]
    assert q["quant_algo"] == QUANT_ALGO[fmt]
    assert q["kv_cache_quant_algo"] == ("FP8" if kv == "fp8" else None)
    assert trt["architecture"] == "LlamaForCausalLM" and trt["mapping"]["world_size"] == 1
    if fmt in ("int4_awq", "w4a8_awq"):
        assert q["group_size"] == 128 and q["pre_quant_scale"] is True and q["has_zero_point"] is False
    if fmt == "nvfp4":
        assert q["group_size"] == 16
    assert (out / "trtllm" / "rank0.safetensors").is_file()
    hfq = json.loads((out / "hf" / "hf_quant_config.json").read_text())["quantization"]
    assert hfq["quant_algo"] == QUANT_ALGO[fmt] and hfq["kv_cache_quant_algo"] == q["kv_cache_quant_algo"]
    for d in ("trtllm", "hf"):
        assert (out / d / "tokenizer.json").is_file(), f"tokenizer missing from {d}"
    m = res.manifest
    assert verify_output(out) == m
    assert m["input_digest"].startswith("sha256:") and m["calibration_digest"].startswith("sha256:")
    assert m["versions"]["nvidia-modelopt"] == "0.47.0"
    assert m["accuracy"]["gate"] == "runtime"  # the verdict is always the exports run with the runtime's numerics
    assert set(m["accuracy"]["exports"]) == {"hf", "trtllm"}
    assert 0 < m["accuracy"]["runtime"]["rel_logit_error"] < 0.3
    if fmt == "nvfp4":
        assert any("needs a GPU" in n for n in m["notes"])
    assert not list(tmp_path.glob(".out.partial.*"))


def test_two_runs_are_byte_identical(tiny_checkpoint: Path, tmp_path: Path) -> None:
    a = quantize(tiny_checkpoint, Recipe("int4_awq", "fp8", **FAST), tmp_path / "a").manifest
    b = quantize(tiny_checkpoint, Recipe("int4_awq", "fp8", **FAST), tmp_path / "b").manifest
    st = {k: v for k, v in a["files"].items() if k.endswith(".safetensors")}
    assert st and st == {k: v for k, v in b["files"].items() if k.endswith(".safetensors")}
    assert a["output_digest"] == b["output_digest"] and a["calibration_digest"] == b["calibration_digest"]


def test_run_checks_the_export_in_one_streamed_pass_in_the_model_dtype(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original's reference logits come from the model already loaded for calibration: the check
    streams only the exports (hf/, then trtllm/), in the recipe's dtype, never a second float32 pass."""
    import torch

    from toolchain.quantize import accuracy

    passes: list[tuple[str, Any]] = []
    real = accuracy.streamed_logits

    def spy(model_dir: Path, tensors: Any, batch: Any, device: str, dtype: Any = None, **kw: Any) -> Any:
        passes.append((type(tensors).__name__, dtype))
        return real(model_dir, tensors, batch, device, dtype, **kw)

    monkeypatch.setattr(accuracy, "streamed_logits", spy)
    m = quantize(tiny_checkpoint, Recipe("fp8", "none", **FAST), tmp_path / "q").manifest
    assert passes == [("HFRuntime", torch.bfloat16), ("TrtllmRuntime", torch.bfloat16)]
    assert 0 < m["accuracy"]["runtime"]["rel_logit_error"] < 0.3
    assert m["accuracy"]["runtime"]["dtype"] == m["accuracy"]["fakequant"]["dtype"] == "bfloat16"
    assert verify_output(tmp_path / "q", rehash=True) == m  # digests taken on the second thread, read again


def test_a_checkpoint_missing_a_weight_is_refused_before_calibration(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """Transformers fills a missing weight with random values; the calibrated model, both exports and the
    accuracy reference would all share them, so nothing downstream could notice."""
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    gone = next(k for k in tensors if k.endswith("mlp.down_proj.weight"))
    del tensors[gone]
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"1 missing, 0 of another shape \\(first: {gone}\\)"):
        quantize(broken, Recipe("fp8", "none", **FAST), tmp_path / "q", gate_method="dequant")
    assert not (tmp_path / "q").exists()


def test_a_checkpoint_with_a_weight_of_another_shape_is_refused_in_one_line(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Transformers raised a RuntimeError from inside from_pretrained (a traceback through the CLI)."""
    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("mlp.down_proj.weight"))
    tensors[name] = torch.cat([tensors[name], tensors[name][:, :1]], dim=1)  # one column wider
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"0 missing, 1 of another shape \\(first: {name}\\)"):
        quantize(broken, Recipe("fp8", "none", **FAST), tmp_path / "q")
    assert not (tmp_path / "q").exists()


def test_gate_fails_logits_that_are_not_finite() -> None:
    from toolchain.quantize.accuracy import Accuracy, gate
    from toolchain.specs.models import AccuracyGate

    limits = AccuracyGate(max_rel_logit_error=0.2, min_top1_agreement=0.7, max_ppl_increase=0.1)
    gate(Accuracy("dequant", 0.1, 0.9, 10.0, 10.5, 40), limits)
    with pytest.raises(AccuracyGateError, match="quantized model's logits are not finite"):
        gate(Accuracy("dequant", float("nan"), 0.9, 10.0, float("nan"), 40), limits)
    with pytest.raises(AccuracyGateError, match="original model's logits are not finite in float16"):
        gate(Accuracy("dequant", float("nan"), 0.9, float("inf"), float("nan"), 40, "float16"), limits)


def test_accuracy_gate_passes_good_and_fails_corrupted_scale(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from toolchain.quantize.accuracy import check_export, gate
    from toolchain.specs.models import AccuracyGate

    out = quantize(tiny_checkpoint, Recipe("fp8", "none", **FAST), tmp_path / "q").out
    limits = AccuracyGate(max_rel_logit_error=0.2, min_top1_agreement=0.7, max_ppl_increase=0.1)
    good = check_export(tiny_checkpoint, out / "hf")
    gate(good, limits)
    st = out / "hf" / "model.safetensors"
    tensors = load_file(str(st))
    name = next(k for k in tensors if k.endswith("mlp.down_proj.weight_scale"))
    tensors[name] = tensors[name] * 40.0  # a broken per-tensor scale
    save_file(tensors, str(st), metadata={"format": "pt"})
    bad = check_export(tiny_checkpoint, out / "hf")
    assert bad.rel_logit_error > good.rel_logit_error * 3
    with pytest.raises(AccuracyGateError, match="accuracy gate failed"):
        gate(bad, limits)
    assert verify_output(out) is None  # the manifest's digests catch the edit too


def test_gate_threshold_from_spec_fails_the_run_and_leaves_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from toolchain.specs.models import AccuracyGate

    strict = AccuracyGate(max_rel_logit_error=0.001, min_top1_agreement=0.99, max_ppl_increase=0.0)
    with pytest.raises(AccuracyGateError):
        quantize(tiny_checkpoint, Recipe("int4_awq", "none", **FAST), tmp_path / "o", accuracy_limits=strict)
    assert not (tmp_path / "o").exists() and not list(tmp_path.iterdir())


def test_nvfp4_fakequant_on_cpu_says_gpu(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(NeedsGPUError, match="needs a GPU"):
        quantize(tiny_checkpoint, Recipe("nvfp4", "none", **FAST), tmp_path / "o", gate_method="fakequant")


def test_bad_inputs(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        quantize(tmp_path, Recipe("fp8"), tmp_path / "o")
    pickle_only = tmp_path / "pk"
    pickle_only.mkdir()
    shutil.copy(tiny_checkpoint / "config.json", pickle_only)
    (pickle_only / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(CheckpointError, match="pickle"):
        quantize(pickle_only, Recipe("fp8"), tmp_path / "o")
    odd = tmp_path / "odd"
    shutil.copytree(tiny_checkpoint, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    (odd / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserInputError, match="FalconForCausalLM"):
        quantize(odd, Recipe("fp8"), tmp_path / "o")
    (tmp_path / "exists").mkdir()
    with pytest.raises(OutputExistsError):
        quantize(tiny_checkpoint, Recipe("fp8"), tmp_path / "exists")


def test_awq_names_the_layer_that_does_not_divide(tmp_path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolchain.quantize.tiny import make_tiny_checkpoint

    src = make_tiny_checkpoint(tmp_path / "t")
    cfg = LlamaConfig.from_pretrained(src)
    cfg.intermediate_size = 192  # down_proj input 192 is not a multiple of 128
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(src)  # type: ignore[no-untyped-call]
    with pytest.raises(UserInputError, match="down_proj has input dimension 192"):
        quantize(src, Recipe("int4_awq", **FAST), tmp_path / "o")


def test_interrupt_mid_export_leaves_nothing(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import modelopt.torch.export as mexport

    def boom(*a: Any, **k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(mexport, "export_tensorrt_llm_checkpoint", boom)
    with pytest.raises(KeyboardInterrupt):
        quantize(tiny_checkpoint, Recipe("fp8", **FAST), tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


def test_cli_from_flags_json_and_existing_output(cli: Cli, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    r = cli(
        "quantize",
        "--checkpoint",
        tiny_checkpoint,
        "--weights",
        "fp8",
        "--kv-cache",
        "fp8",
        "--out",
        out,
        "--calib-samples",
        "8",
        "--calib-seq-len",
        "32",
        "--json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["manifest"]["recipe"]["weights"] == "fp8"
    r = cli("quantize", "--checkpoint", tiny_checkpoint, "--weights", "fp8", "--out", out)
    assert r.exit_code == 2 and "already exists" in r.output and "--force" in r.output
    r = cli("quantize", "--checkpoint", tiny_checkpoint, "--weights", "int3", "--out", tmp_path / "x")
    assert r.exit_code == 2 and "'int3' is not one of" in r.output and "nvfp4" in r.output


def test_calibration_sources(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from toolchain.quantize.calib import load_texts, tokenize

    (tmp_path / "c.txt").write_text("first line of text\n\nsecond line\n")
    (tmp_path / "c.jsonl").write_text('{"text": "alpha"}\n{"text": "beta"}\n')
    assert sorted(set(load_texts("c.txt", tmp_path, 0, 4))) == ["first line of text", "second line"]
    assert sorted(set(load_texts(str(tmp_path / "c.jsonl"), tmp_path, 0, 4))) == ["alpha", "beta"]
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(UserInputError, match=r"bad\.jsonl:1"):
        load_texts("bad.jsonl", tmp_path, 0, 2)
    with pytest.raises(UserInputError, match="does not exist"):
        load_texts("missing.txt", tmp_path, 0, 2)
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    b1, d1 = tokenize(tok, load_texts("builtin", tmp_path, 7, 8), 32, 4)
    _, d2 = tokenize(tok, load_texts("builtin", tmp_path, 7, 8), 32, 4)
    _, d3 = tokenize(tok, load_texts("builtin", tmp_path, 8, 8), 32, 4)
    assert d1 == d2 != d3 and len(b1) == 2 and tuple(b1[0].input_ids.shape) == (4, 32)


def test_cli_prints_the_result_on_stdout_and_calibration_progress_on_stderr(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    cmd = [sys.executable, "-m", "toolchain.cli.main", "quantize", "--checkpoint", str(tiny_checkpoint)]
    cmd += ["--weights", "fp8", "--out", str(tmp_path / "q")]
    cmd += ["--calib-samples", "8", "--calib-seq-len", "32", "--calib-batch-size", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"wrote {tmp_path / 'q'} (fp8") and "rel logit err" in p.stdout
    assert "importing torch, transformers and ModelOpt" in p.stderr  # said before the slow imports
    assert "calibration: 2 / 2 batch (100%)" in p.stderr


def test_a_failing_check_does_not_wait_for_every_digest(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exports are hashed on a second thread while the accuracy check runs; when the check fails (or
    Ctrl-C), the hashing stops at the next file instead of finishing an output that is being dropped."""
    import threading
    import time

    from toolchain.digest import hash_file
    from toolchain.quantize import run as run_mod

    exported = len(quantize(tiny_checkpoint, Recipe("fp8", "none", **FAST), tmp_path / "ok").manifest["files"])
    hashed: list[Path] = []
    started = threading.Event()
    real = hash_file

    def slow_hash(path: Path, *args: Any, **kw: Any) -> str:
        started.set()
        hashed.append(path)
        time.sleep(0.3)
        return real(path, *args, **kw)

    def failing_check(self: Any, calibrated: Any, out: Path) -> Any:
        assert started.wait(10)
        raise AccuracyGateError("accuracy gate failed (runtime numerics): on purpose")

    monkeypatch.setattr("toolchain.artifacts.quantized.hash_file", slow_hash)
    monkeypatch.setattr(run_mod._Run, "check_exports", failing_check)
    with pytest.raises(AccuracyGateError, match="on purpose"):
        quantize(tiny_checkpoint, Recipe("fp8", "none", **FAST), tmp_path / "q")
    assert 1 <= len(hashed) <= 2 < exported  # a whole export is config, weights and tokenizer files, twice
    assert not (tmp_path / "q").exists()
