"""Accuracy gate: compare a quantized model with the original on held-out text.

Two ways to get the quantized logits:
- ``fakequant``: ModelOpt's fake-quantized model in memory (weights, activations, KV);
- ``dequant``: the exported unified HF checkpoint dequantized with plain torch and loaded into the
  original architecture (weights only). This is the only way on CPU for NVFP4, whose fake-quant
  forward needs CUDA, and it checks the bytes that were actually written.

Packing (docs/modelopt.md, "Dequantizing the HF export"): FP8 ``w·s``; INT8 ``w·s[:,None]``; INT4/W4A8 AWQ uint8
[out/2, in], low nibble row 2i, high nibble row 2i+1, signed, ``q·repeat(s, group)``; NVFP4 uint8
[out, in/2], low nibble col 2j, E2M1 values, ``q·repeat(s,16)·s2``; then ``·pre_quant_scale`` per column.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import AccuracyGateError, QuantizeError

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


@dataclass
class Accuracy:
    method: str
    rel_logit_error: float
    top1_agreement: float
    ppl_original: float
    ppl_quantized: float
    tokens: int

    @property
    def ppl_increase(self) -> float:
        return self.ppl_quantized / self.ppl_original - 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ppl_increase": self.ppl_increase}


def held_out_batch(tokenizer: Any) -> Any:
    from toolchain.quantize.calib import HELD_OUT_TEXT

    return tokenizer(HELD_OUT_TEXT, return_tensors="pt", padding=True)


def logits_of(model: Any, batch: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()


def compare(ref: Any, q: Any, batch: Any, method: str) -> Accuracy:
    import torch

    mask = batch["attention_mask"].bool()
    r, s = ref[mask], q[mask]
    rel = float(torch.linalg.vector_norm(s - r) / torch.linalg.vector_norm(r))
    top1 = float((r.argmax(-1) == s.argmax(-1)).float().mean())

    def ppl(logits: Any) -> float:
        ids = batch["input_ids"][:, 1:]
        m = mask[:, 1:]
        lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        return float(torch.exp(-(lp[m]).mean()))

    return Accuracy(method, rel, top1, ppl(ref), ppl(q), int(mask.sum()))


def _unpack_int4_rows(packed: Any) -> Any:
    import torch

    b = packed.to(torch.int16)
    lo, hi = b & 0xF, (b >> 4) & 0xF
    lo = torch.where(lo > 7, lo - 16, lo)
    hi = torch.where(hi > 7, hi - 16, hi)
    out = torch.empty((packed.shape[0] * 2, packed.shape[1]), dtype=torch.float32)
    out[0::2], out[1::2] = lo.float(), hi.float()
    return out


def _unpack_e2m1_cols(packed: Any) -> Any:
    import torch

    table = torch.tensor(E2M1)
    b = packed.to(torch.int64)
    out = torch.empty((packed.shape[0], packed.shape[1] * 2), dtype=torch.float32)
    out[:, 0::2], out[:, 1::2] = table[b & 0xF], table[(b >> 4) & 0xF]
    return out


def dequantize_hf_export(export_dir: Path) -> dict[str, Any]:
    """Plain-torch dequantization of a unified HF checkpoint to a float32 state dict."""
    import torch
    from safetensors.torch import load_file

    qcfg = json.loads((export_dir / "hf_quant_config.json").read_text())["quantization"]
    algo = qcfg.get("quant_algo")
    group = int(qcfg.get("group_size") or 128)
    tensors: dict[str, Any] = {}
    for f in sorted(export_dir.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    out: dict[str, Any] = {}
    aux = ("weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale", "k_scale", "v_scale")
    for name, t in tensors.items():
        if name.rsplit(".", 1)[-1] in aux:
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        scale = tensors.get(f"{base}.weight_scale") if base else None
        if scale is None:
            out[name] = t.float()
            continue
        if algo in ("W4A16_AWQ", "W4A8_AWQ"):
            w = _unpack_int4_rows(t) * scale.float().repeat_interleave(group, 1)
        elif algo in ("NVFP4", "W4A16_NVFP4"):
            s2 = tensors[f"{base}.weight_scale_2"].float()
            w = _unpack_e2m1_cols(t) * scale.float().repeat_interleave(16, 1) * s2
        elif t.dtype == torch.float8_e4m3fn:
            w = t.float() * scale.float()
        elif t.dtype == torch.int8:
            w = t.float() * (scale.float()[:, None] if scale.dim() else scale.float())
        else:
            raise QuantizeError(f"cannot dequantize {name} ({t.dtype}) for quant_algo {algo}")
        pqs = tensors.get(f"{base}.pre_quant_scale")
        if pqs is not None:
            w = w * pqs.float()[None, :]
        out[name] = w
    return out


def dequant_model(original_dir: Path, export_dir: Path) -> Any:
    """The original architecture with the export's dequantized weights loaded."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(original_dir, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    state = dequantize_hf_export(export_dir)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise QuantizeError(
            f"export {export_dir} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    return model


def check_export(original_dir: Path, export_dir: Path) -> Accuracy:
    """Dequantized-export accuracy (weights only) against the original in float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(original_dir)
    batch = held_out_batch(tok)
    ref = logits_of(AutoModelForCausalLM.from_pretrained(original_dir, dtype=torch.float32).eval(), batch)  # type: ignore[no-untyped-call]
    q = logits_of(dequant_model(original_dir, export_dir), batch)
    return compare(ref, q, batch, "dequant")


def gate(acc: Accuracy, limits: Any) -> None:
    """Raise AccuracyGateError when any metric is over the spec's threshold."""
    fails = []
    if acc.rel_logit_error > limits.max_rel_logit_error:
        fails.append(f"relative logit error {acc.rel_logit_error:.3f} > {limits.max_rel_logit_error}")
    if acc.top1_agreement < limits.min_top1_agreement:
        fails.append(f"top-1 agreement {acc.top1_agreement:.2f} < {limits.min_top1_agreement}")
    if acc.ppl_increase > limits.max_ppl_increase:
        fails.append(f"perplexity +{acc.ppl_increase:.1%} > +{limits.max_ppl_increase:.0%}")
    if fails:
        raise AccuracyGateError(f"accuracy gate failed ({acc.method}): " + "; ".join(fails))
