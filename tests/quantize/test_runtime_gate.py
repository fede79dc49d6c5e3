"""The accuracy gate runs each export the way the runtime runs it (issue 46): every scale the runtime reads
changes the verdict, both exports are judged, and `toolchain accuracy` judges an existing export again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import SPEC_CALIB, Cli
from toolchain.artifacts.recipe import Recipe
from toolchain.errors import AccuracyGateError
from toolchain.quantize import runtime
from toolchain.quantize.run import quantize
from toolchain.specs.models import AccuracyGate

# engine_specs/tiny.yaml's thresholds (quantization.accuracy), written out here so that the test does not read
# them from the module it checks (its calibration, SPEC_CALIB, is in tests/conftest.py with the tiny_fp8 fixture).
SPEC_LIMITS = AccuracyGate(max_rel_logit_error=0.2, min_top1_agreement=0.7, max_ppl_increase=0.1)


@pytest.fixture(scope="module")
def decisive(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with its query and key projections ×4: random-weight attention is nearly uniform, so
    what the KV cache holds barely moves the logits; with sharper scores a corrupted K or V scale shows."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("decisive") / "tiny"
    shutil.copytree(tiny_checkpoint, out)
    for f in out.glob("*.safetensors"):
        tensors = load_file(str(f))
        for name in tensors:
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                tensors[name] = tensors[name] * 4
        save_file(tensors, str(f), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def exports(
    tiny_checkpoint: Path, decisive: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path]]:
    """(original, quantized): FP8 + FP8 KV (the tiny spec's recipe) of the decisive-attention Llama, INT8
    SmoothQuant + FP8 KV and INT4 AWQ of the tiny Llama, each quantized once."""
    root = tmp_path_factory.mktemp("runtime-gate")
    recipes = {
        "fp8": (decisive, Recipe("fp8", "fp8", **SPEC_CALIB)),
        "int8_sq": (tiny_checkpoint, Recipe("int8_sq", "fp8", **SPEC_CALIB)),
        "int4_awq": (tiny_checkpoint, Recipe("int4_awq", "none", **SPEC_CALIB)),
    }
    return {name: (src, quantize(src, r, root / name).out) for name, (src, r) in recipes.items()}


def _scaled(src: Path, dest: Path, export: str, leaf: str, factor: float) -> int:
    """Copy the quantized checkpoint ``src`` to ``dest`` with every tensor of ``export`` whose name ends in
    ``.<leaf>`` multiplied by ``factor``; returns how many tensors were changed."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest)
    changed = 0
    for f in sorted((dest / export).glob("*.safetensors")):
        tensors = load_file(str(f))
        for name, t in tensors.items():
            if name.endswith(f".{leaf}"):
                tensors[name] = (t.float() * factor).to(t.dtype)
                changed += 1
        save_file(tensors, str(f), metadata={"format": "pt"})
    return changed


# INT4 AWQ misses the tiny spec's top-1 0.7 on the tiny Llama (0.6968 on hf/); it is held to quantize's defaults
LIMITS = {"fp8": SPEC_LIMITS, "int8_sq": SPEC_LIMITS, "int4_awq": AccuracyGate()}


def _figures(checkpoint: Path, out: Path) -> dict[str, tuple[float, float, float]]:
    v = runtime.judge(checkpoint, out, SPEC_LIMITS)
    return {n: (a.rel_logit_error, a.top1_agreement, a.ppl_increase) for n, a in v.results.items()}


@pytest.mark.slow
def test_the_tiny_spec_passes_on_both_exports_and_the_manifest_names_the_gate(
    tiny_checkpoint: Path, tiny_fp8: Path
) -> None:
    m = json.loads((tiny_fp8 / "manifest.json").read_text())["accuracy"]
    assert m["gate"] == "runtime" and m["gate_version"] == runtime.GATE_VERSION
    assert set(m["exports"]) == {"hf", "trtllm"}
    v = runtime.judge(tiny_checkpoint, tiny_fp8, SPEC_LIMITS)
    assert v.passed, v.failures
    # `toolchain accuracy` reproduces what quantize recorded, bit for bit (same reference logits, same dtype)
    for name, acc in v.results.items():
        assert acc.to_json() == m["exports"][name]


# (format, export, scale tensor leaf): every scale kind each runtime reads, in the names each export writes.
CORRUPTIONS = [
    ("fp8", "hf", "input_scale"),
    ("fp8", "hf", "k_scale"),
    ("fp8", "hf", "v_scale"),
    ("fp8", "hf", "weight_scale"),
    ("fp8", "trtllm", "activation_scaling_factor"),
    ("fp8", "trtllm", "kv_cache_scaling_factor"),
    ("fp8", "trtllm", "weights_scaling_factor"),
    ("int8_sq", "hf", "input_scale"),
    ("int8_sq", "hf", "pre_quant_scale"),
    ("int8_sq", "trtllm", "prequant_scaling_factor"),
    ("int4_awq", "hf", "pre_quant_scale"),
    ("int4_awq", "hf", "weight_scale"),
    ("int4_awq", "trtllm", "prequant_scaling_factor"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "export", "leaf"), CORRUPTIONS, ids=["-".join(c) for c in CORRUPTIONS])
def test_a_corrupted_scale_fails_the_gate_naming_its_export(
    exports: dict[str, tuple[Path, Path]], tmp_path: Path, fmt: str, export: str, leaf: str
) -> None:
    original, good = exports[fmt]
    before = _figures(original, good)
    limits = LIMITS[fmt]
    assert not runtime.judge(original, good, limits).failures[export]  # it passes before the corruption
    bad = tmp_path / "bad"
    assert _scaled(good, bad, export, leaf, 1e-4) > 0
    after = _figures(original, bad)
    other = "trtllm" if export == "hf" else "hf"
    assert after[other] == before[other]  # the other export is untouched, and so are its figures
    assert after[export] != before[export]
    with pytest.raises(AccuracyGateError) as e:
        runtime.gate(runtime.judge(original, bad, limits).results, limits)
    assert f" on {export}/: " in e.value.message and f"{other}/:" not in e.value.message


@pytest.mark.slow
def test_int8_sq_calibrated_on_garbage_fails(cli: Cli, tiny_checkpoint: Path, tmp_path: Path) -> None:
    """One 8-token sample of garbage text: activations the held-out text brings exceed the calibrated INT8 range
    and are clipped at run time; a weights-only check never sees it."""
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("zq xv 9# !!kk lorem\n")
    args = ("--checkpoint", tiny_checkpoint, "--weights", "int8_sq", "--kv-cache", "fp8", "--calib-dataset", garbage)
    small = ("--calib-samples", "1", "--calib-seq-len", "8", "--calib-batch-size", "1")
    limits = ("--max-rel-logit-error", "0.2", "--min-top1-agreement", "0.7", "--max-ppl-increase", "0.1")
    res = cli("quantize", *args, *small, *limits, "--out", tmp_path / "q")
    assert res.exit_code == 5, res.output
    assert "accuracy gate failed (runtime numerics) on hf/: " in res.output
    assert "trtllm/: " in res.output
    assert not (tmp_path / "q").exists()
    # the same export, written without thresholds, is failed again by `toolchain accuracy`
    free = cli("quantize", *args, *small, "--out", tmp_path / "free")
    assert free.exit_code == 0, free.output
    judged = cli("accuracy", "--checkpoint", tiny_checkpoint, "--quantized", tmp_path / "free", *limits, "--json")
    assert judged.exit_code == 5, judged.output
    doc = json.loads(judged.stdout)
    assert doc["passed"] is False and doc["recorded_gate_version"] == runtime.GATE_VERSION
    assert doc["exports"]["hf"]["failures"] and doc["exports"]["trtllm"]["failures"]


@pytest.mark.slow
def test_accuracy_command_passes_an_export_within_its_thresholds(
    cli: Cli, tiny_checkpoint: Path, tiny_fp8: Path
) -> None:
    res = cli("accuracy", "--checkpoint", tiny_checkpoint, "--quantized", tiny_fp8, "--min-top1-agreement", "0.7")
    assert res.exit_code == 0, res.output
    assert "hf/: " in res.stdout and "trtllm/: " in res.stdout and "FAIL" not in res.stdout


def test_accuracy_command_refuses_a_directory_without_exports(cli: Cli, tiny_checkpoint: Path, tmp_path: Path) -> None:
    res = cli("accuracy", "--checkpoint", tiny_checkpoint, "--quantized", tmp_path)
    assert res.exit_code != 0
    assert "holds neither hf/ nor trtllm/" in res.stderr


def test_activation_quantizers_follow_their_formats() -> None:
    import torch

    x = torch.tensor([0.0, 0.3, -1.7, 5.0, 1000.0])
    s = torch.tensor(0.01)
    assert runtime.fake_int8(x, s).tolist() == pytest.approx([0.0, 0.3, -1.27, 1.27, 1.27])
    fp8 = runtime.fake_fp8(x, s)
    assert fp8[-1].item() == pytest.approx(4.48)  # clamped at 448 × scale
    assert fp8[1].item() == pytest.approx(0.3, rel=2**-4)  # e4m3 keeps 3 mantissa bits
    block = torch.linspace(-1.0, 1.0, 16)
    q = runtime.fake_nvfp4(block, torch.tensor(1.0 / (6 * 448)))
    # each value lands on an E2M1 value times the block's scale (amax 1 / 6, an FP8-representable step away)
    scale = q.abs().max().item() / 6.0
    assert {round(v / scale, 3) for v in q.abs().tolist()} <= {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}


@pytest.mark.slow
def test_a_tp2_trtllm_checkpoint_is_joined_back(tiny_checkpoint: Path, tiny_fp8: Path, tmp_path: Path) -> None:
    """Each rank's shard is dequantized with its own scales and the shards joined (qkv per rank is q, k, v of
    its heads): the TP2 export runs exactly as the TP1 one, whose scales are the same."""
    tp2 = quantize(tiny_checkpoint, Recipe("fp8", "fp8", **SPEC_CALIB, tp=2), tmp_path / "tp2").out
    assert len(list((tp2 / "trtllm").glob("rank*.safetensors"))) == 2
    one = json.loads((tiny_fp8 / "manifest.json").read_text())["accuracy"]["exports"]
    two = json.loads((tp2 / "manifest.json").read_text())["accuracy"]["exports"]
    assert two == one


@pytest.mark.slow
def test_a_reused_export_an_older_gate_passed_is_judged_again(
    exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """`up` reuses a quantized checkpoint whose manifest verifies; one judged by an older gate (weights only) is
    judged again by this one, and refused when it misses a threshold."""
    original, good = exports["fp8"]
    recipe = Recipe("fp8", "fp8", **SPEC_CALIB)
    old = tmp_path / "old"
    shutil.copytree(good, old)
    m = json.loads((old / "manifest.json").read_text())
    m["accuracy"] = {"gate": "dequant", "dequant": m["accuracy"]["runtime"]}  # what the gate before wrote
    (old / "manifest.json").write_text(json.dumps(m))
    again = quantize(original, recipe, old, reuse=True, input_digest=m["input_digest"], accuracy_limits=SPEC_LIMITS)
    assert again.reused and any("judged again by runtime-numerics/1: passed" in n for n in again.notes)
    strict = AccuracyGate(max_rel_logit_error=0.01)
    with pytest.raises(AccuracyGateError, match=r"passed by an older gate \(dequant\); judged again, accuracy gate"):
        quantize(original, recipe, old, reuse=True, input_digest=m["input_digest"], accuracy_limits=strict)
    current = quantize(original, recipe, good, reuse=True, input_digest=m["input_digest"], accuracy_limits=strict)
    assert current.reused and current.notes == []  # this gate's own verdict stands
