"""The accuracy check streams weights module by module: same logits as a whole float32 model, and
memory that does not grow with the model (no ModelOpt needed: exports are written here by hand)."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from toolchain.quantize import accuracy as acc  # noqa: E402

FP8_MAX = 448.0  # largest finite float8_e4m3fn value


def write_fp8_export(src: Path, dest: Path) -> dict[str, Any]:
    """A unified-HF-style FP8 export of ``src``: per-tensor scaled float8 Linear weights, the rest as is.
    Returns the float32 weights it stands for (fp8 value x scale), worked out here, as the oracle."""
    from safetensors.torch import load_file, save_file

    tensors = {}
    for f in src.glob("*.safetensors"):
        tensors.update(load_file(str(f)))
    out: dict[str, Any] = {}
    meant: dict[str, Any] = {}
    for name, t in tensors.items():
        if name.endswith("_proj.weight"):
            scale = t.float().abs().max() / FP8_MAX
            out[name] = (t.float() / scale).to(torch.float8_e4m3fn)
            out[name[: -len("weight")] + "weight_scale"] = scale.reshape(())
            meant[name] = out[name].float() * scale
        else:
            out[name] = t
            meant[name] = t.float()
    dest.mkdir(parents=True)
    save_file(out, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    return meant


def whole_model_logits(src: Path, state: dict[str, Any] | None, batch: Any) -> Any:
    """The oracle: the whole model loaded by Transformers in float32, weights optionally replaced."""
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state, strict=False)
    with torch.no_grad():
        return model(**batch).logits.float()


@pytest.mark.slow
def test_streamed_logits_equal_the_whole_model(tiny_checkpoint: Path, tmp_path: Path) -> None:
    batch = acc.held_out_batch(transformers.AutoTokenizer.from_pretrained(tiny_checkpoint))
    ref = acc.streamed_logits(tiny_checkpoint, acc.CheckpointTensors(tiny_checkpoint, "cpu"), batch, "cpu")
    assert torch.equal(ref, whole_model_logits(tiny_checkpoint, None, batch))
    meant = write_fp8_export(tiny_checkpoint, tmp_path / "hf")
    q = acc.streamed_logits(tiny_checkpoint, acc.DequantizedExport(tmp_path / "hf", "cpu"), batch, "cpu")
    assert torch.equal(q, whole_model_logits(tiny_checkpoint, meant, batch))
    assert not torch.equal(q, ref)
    got = acc.check_export(tiny_checkpoint, tmp_path / "hf")
    assert (
        got.method == "dequant" and 0 < got.rel_logit_error < 0.2 and got.tokens == int(batch["attention_mask"].sum())
    )


@pytest.mark.slow
def test_streamed_original_in_model_dtype_is_the_loaded_models_forward(tiny_checkpoint: Path) -> None:
    """A quantize run compares the dequantized export with the logits it took from the loaded model before
    calibrating; that is sound only because a streamed pass of the original gives exactly those logits."""
    batch = acc.held_out_batch(transformers.AutoTokenizer.from_pretrained(tiny_checkpoint))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16).eval()
    streamed = acc.streamed_logits(
        tiny_checkpoint, acc.CheckpointTensors(tiny_checkpoint, "cpu"), batch, "cpu", torch.bfloat16
    )
    assert torch.equal(streamed, acc.logits_of(loaded, batch))
    assert not torch.equal(streamed, acc.logits_of(loaded.float(), batch))  # the dtype is honoured


def test_check_export_with_a_reference_streams_only_the_export(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = acc.held_out_batch(transformers.AutoTokenizer.from_pretrained(tiny_checkpoint))
    write_fp8_export(tiny_checkpoint, tmp_path / "hf")
    whole = acc.check_export(tiny_checkpoint, tmp_path / "hf", dtype=torch.bfloat16)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16).eval()
    seen: list[type] = []
    real = acc.streamed_logits

    def spy(model_dir: Path, tensors: acc.CheckpointTensors, *args: Any) -> Any:
        seen.append(type(tensors))
        return real(model_dir, tensors, *args)

    monkeypatch.setattr(acc, "streamed_logits", spy)
    reference = (acc.logits_of(loaded, batch), batch)
    shared = acc.check_export(tiny_checkpoint, tmp_path / "hf", dtype=torch.bfloat16, reference=reference)
    assert seen == [acc.DequantizedExport]
    assert shared == whole


class _Spy(acc.CheckpointTensors):
    """Records the most bytes of tensors it handed out that were alive at the same time."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "cpu")
        self.live: list[tuple[weakref.ref[Any], int]] = []
        self.peak = 0

    def get(self, name: str, dtype: Any = None) -> Any:
        t = super().get(name, dtype)
        self.live = [(r, n) for r, n in self.live if r() is not None] + [(weakref.ref(t), t.nbytes)]
        self.peak = max(self.peak, sum(n for _, n in self.live))
        return t


def test_streaming_holds_one_module_at_a_time(tiny_checkpoint: Path) -> None:
    batch = acc.held_out_batch(transformers.AutoTokenizer.from_pretrained(tiny_checkpoint))
    spy = _Spy(tiny_checkpoint)
    acc.streamed_logits(tiny_checkpoint, spy, batch, "cpu")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    per_module = [sum(p.nbytes for p in m.parameters(recurse=False)) for m in model.modules()]
    total = sum(p.nbytes for p in model.parameters())
    assert 0 < spy.peak <= max(per_module) < total / 4


@pytest.mark.slow
def test_check_export_memory_does_not_grow_with_the_model(tmp_path: Path) -> None:
    """A 30M-parameter model (120 MB in float32): the check must not hold a float32 copy of it."""
    psutil = pytest.importorskip("psutil")
    from toolchain.quantize.tiny import make_tiny_checkpoint

    sizes = {
        "vocab_size": 2048,
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
    }
    src = make_tiny_checkpoint(tmp_path / "m", sizes=sizes, dtype="bfloat16")
    write_fp8_export(src, tmp_path / "hf")
    fp32_bytes = 2 * sum(f.stat().st_size for f in src.glob("*.safetensors"))
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, proc.memory_info().rss)

    t = threading.Thread(target=sample)
    t.start()
    try:
        acc.check_export(src, tmp_path / "hf")
    finally:
        done.set()
        t.join()
    assert peak - base < fp32_bytes / 2, f"grew {(peak - base) / 1e6:.0f} MB for a {fp32_bytes / 1e6:.0f} MB model"
