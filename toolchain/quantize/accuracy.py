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
import math
from collections.abc import Callable
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
    dtype: str = "float32"  # what both forwards computed in

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


def compare(ref: Any, q: Any, batch: Any, method: str, dtype: Any = None) -> Accuracy:
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

    name = str(dtype or torch.float32).removeprefix("torch.")
    return Accuracy(method, rel, top1, ppl(ref), ppl(q), int(mask.sum()), name)


def _unpack_int4_rows(packed: Any) -> Any:
    import torch

    b = packed.to(torch.int16)
    lo, hi = b & 0xF, (b >> 4) & 0xF
    lo = torch.where(lo > 7, lo - 16, lo)
    hi = torch.where(hi > 7, hi - 16, hi)
    out = torch.empty((packed.shape[0] * 2, packed.shape[1]), dtype=torch.float32, device=packed.device)
    out[0::2], out[1::2] = lo.float(), hi.float()
    return out


def _unpack_e2m1_cols(packed: Any) -> Any:
    import torch

    table = torch.tensor(E2M1, device=packed.device)
    b = packed.to(torch.int64)
    out = torch.empty((packed.shape[0], packed.shape[1] * 2), dtype=torch.float32, device=packed.device)
    out[:, 0::2], out[:, 1::2] = table[b & 0xF], table[(b >> 4) & 0xF]
    return out


class CheckpointTensors:
    """The tensors of a checkpoint directory, read one at a time onto ``device`` as float32.

    No file stays mapped between reads, so a pass over a checkpoint holds one tensor at a time,
    never the checkpoint. ``*.safetensors`` first; pickle ``*.bin`` only when there are none.
    """

    def __init__(self, root: Path, device: str) -> None:
        from safetensors import safe_open

        self.root, self.device = root, device
        self._files: dict[str, Path] = {}
        for f in sorted(root.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as h:
                self._files.update(dict.fromkeys(h.keys(), f))
        self._pickled: dict[str, Any] = {}
        if not self._files:
            import torch

            for f in sorted(root.glob("*.bin")):
                # mmap: the weights stay in the page cache, not in this process, until read
                self._pickled.update(torch.load(f, map_location="cpu", mmap=True, weights_only=True))

    def __contains__(self, name: str) -> bool:
        return name in self._files or name in self._pickled

    def raw(self, name: str) -> Any:
        """The stored tensor, on the device, in its stored dtype."""
        if name in self._pickled:
            return self._pickled[name].to(self.device)
        from safetensors import safe_open

        with safe_open(str(self._files[name]), framework="pt") as h:
            return h.get_tensor(name).to(self.device)

    def get(self, name: str, dtype: Any = None) -> Any:
        """The tensor as ``dtype`` (float32 unless given)."""
        import torch

        return self.raw(name).to(dtype or torch.float32)


class DequantizedExport(CheckpointTensors):
    """A unified HF export read back as the float32 weights it stands for (plain-torch dequantization)."""

    AUX = ("weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale", "k_scale", "v_scale")

    def __init__(self, root: Path, device: str) -> None:
        super().__init__(root, device)
        qcfg = json.loads((root / "hf_quant_config.json").read_text())["quantization"]
        self.algo = qcfg.get("quant_algo")
        self.group = int(qcfg.get("group_size") or 128)
        self.fold_pre_quant_scale = True  # the runtime view (quantize.runtime) applies it to the input instead

    def names(self) -> list[str]:
        """The model tensors of the export (scales and other quantizer state left out)."""
        return [n for n in self._files if n.rsplit(".", 1)[-1] not in self.AUX]

    def get(self, name: str, dtype: Any = None) -> Any:
        """The weight it stands for, dequantized in float32, then as ``dtype`` (float32 unless given)."""
        w = self._dequantized(name)
        return w if dtype is None else w.to(dtype)

    def _dequantized(self, name: str) -> Any:
        import torch

        t = self.raw(name)
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if base is None or f"{base}.weight_scale" not in self:
            return t.float()
        scale = self.get_aux(f"{base}.weight_scale")
        if self.algo in ("W4A16_AWQ", "W4A8_AWQ"):
            w = _unpack_int4_rows(t) * scale.repeat_interleave(self.group, 1)
        elif self.algo in ("NVFP4", "W4A16_NVFP4"):
            w = _unpack_e2m1_cols(t) * scale.repeat_interleave(16, 1) * self.get_aux(f"{base}.weight_scale_2")
        elif t.dtype == torch.float8_e4m3fn:
            w = t.float() * scale
        elif t.dtype == torch.int8:
            w = t.float() * (scale[:, None] if scale.dim() else scale)
        else:
            raise QuantizeError(f"cannot dequantize {name} ({t.dtype}) for quant_algo {self.algo}")
        if self.fold_pre_quant_scale and f"{base}.pre_quant_scale" in self:
            w = w * self.get_aux(f"{base}.pre_quant_scale")[None, :]
        return w

    def get_aux(self, name: str) -> Any:
        return self.raw(name).float()


def dequantize_hf_export(export_dir: Path, device: str = "cpu") -> dict[str, Any]:
    """Plain-torch dequantization of a whole unified HF checkpoint to a float32 state dict (small models, tests)."""
    src = DequantizedExport(export_dir, device)
    return {n: src.get(n) for n in src.names()}


# A parameter's stored tensor: one name, or groups of per-expert names that are stacked (each group along a
# new first dimension) and then concatenated along dimension 1 (a fused gate_up_proj).
Stored = str | tuple[tuple[str, ...], ...]
# Transformers 5 fuses the experts of an MoE layer into two 3-D parameters when it loads a checkpoint
# (transformers/conversion_mapping.py, "mixtral" and "qwen2_moe"); checkpoints, ModelOpt's unified export
# included, keep one Linear per expert: gate_up_proj [E, 2I, H] = cat(stack(gate), stack(up)), down_proj
# [E, H, I] = stack(down). Mixtral's block is stored as block_sparse_moe (w1 gate, w3 up, w2 down).
_FUSED_EXPERTS = {
    "gate_up_proj": (("gate_proj.weight", "up_proj.weight"), ("w1.weight", "w3.weight")),
    "down_proj": (("down_proj.weight",), ("w2.weight",)),
}


def stored_names(full: str, tensors: Any) -> Stored | None:
    """Where the parameter ``full`` of a Transformers model is stored in ``tensors``, or None."""
    prefixes = [full]
    if ".mlp." in full:
        prefixes.append(full.replace(".mlp.", ".block_sparse_moe.", 1))
    for name in prefixes:
        if name in tensors:
            return name
    base, _, leaf = full.rpartition(".experts.")
    if not base or leaf not in _FUSED_EXPERTS:
        return None
    for stem in dict.fromkeys((base, base.replace(".mlp", ".block_sparse_moe", 1))):
        for parts in _FUSED_EXPERTS[leaf]:
            count = 0
            while f"{stem}.experts.{count}.{parts[0]}" in tensors:
                count += 1
            if count and all(f"{stem}.experts.{e}.{p}" in tensors for p in parts for e in range(count)):
                return tuple(tuple(f"{stem}.experts.{e}.{p}" for e in range(count)) for p in parts)
    return None


def streamed_logits(
    model_dir: Path,
    tensors: Any,
    batch: Any,
    device: str,
    dtype: Any = None,
    *,
    instrument: Callable[[Any], None] | None = None,
) -> Any:
    """Logits of ``model_dir``'s architecture with weights from ``tensors`` (a ``CheckpointTensors``, or anything
    with its ``root``, ``in`` and ``get``), one module's weights at a time, computed in ``dtype`` (float32 unless
    given); ``instrument`` is called with the built model before the forward (``quantize.runtime`` hooks it).

    The model is built with its parameters on the meta device; a hook before each module's forward
    reads that module's own parameters onto ``device`` and one after it drops them again. Peak
    memory is one module's weights (the largest is usually the output head) plus activations,
    whatever the model's size; every tensor is read once per pass.
    """
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = dtype or torch.float32
    cfg = AutoConfig.from_pretrained(model_dir)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)  # type: ignore[no-untyped-call]
    # Built on the meta device, a tied output head is a parameter of its own; tie it again, so it reads
    # the input embedding (a tied checkpoint, and ModelOpt's export of one, store only that).
    model.tie_weights()
    model.eval()
    for mod in model.modules():
        for bname, buf in list(mod._buffers.items()):
            if buf is not None:
                mod._buffers[bname] = buf.to(device)
    # Which stored tensor each parameter slot reads; tied parameters share one stored name.
    aliases: dict[int, list[tuple[torch.nn.Module, str, str]]] = {}
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            aliases.setdefault(id(p), []).append((mod, pname, f"{mname}.{pname}" if mname else pname))
    plan: dict[torch.nn.Module, list[tuple[str, Stored]]] = {}
    for slots in aliases.values():
        stored = next((found for _, _, full in slots if (found := stored_names(full, tensors)) is not None), None)
        if stored is None:
            raise QuantizeError(f"{tensors.root} has no tensor for {slots[0][2]}; it does not match {model_dir}")
        for mod, pname, _ in slots:
            plan.setdefault(mod, []).append((pname, stored))
    placeholders = {mod: {pname: mod._parameters[pname] for pname, _ in slots} for mod, slots in plan.items()}

    def read(stored: Stored) -> Any:
        if isinstance(stored, str):
            return tensors.get(stored, dtype)
        return torch.cat([torch.stack([tensors.get(n, dtype) for n in group]) for group in stored], dim=1)

    def load(mod: torch.nn.Module, args: Any) -> None:
        for pname, stored in plan[mod]:
            mod._parameters[pname] = torch.nn.Parameter(read(stored), requires_grad=False)

    def drop(mod: torch.nn.Module, args: Any, output: Any) -> None:
        mod._parameters.update(placeholders[mod])

    if instrument is not None:
        instrument(model)
    handles = []
    for mod in plan:
        handles += [mod.register_forward_pre_hook(load), mod.register_forward_hook(drop)]
    try:
        with torch.no_grad():
            out = model(
                input_ids=batch["input_ids"].to(device),
                attention_mask=batch["attention_mask"].to(device),
                use_cache=False,
            )
        return out.logits.float()
    finally:
        for h in handles:
            h.remove()


def reference_logits(original_dir: Path, device: str, dtype: Any = None) -> tuple[Any, Any]:
    """(logits, batch): the original's logits on the held-out batch in ``dtype``, streamed from its files."""
    from transformers import AutoTokenizer

    batch = held_out_batch(AutoTokenizer.from_pretrained(original_dir))
    ref = streamed_logits(original_dir, CheckpointTensors(original_dir, device), batch, device, dtype).cpu()
    return ref, batch


def check_export(
    original_dir: Path,
    export_dir: Path,
    device: str = "cpu",
    *,
    dtype: Any = None,
    reference: tuple[Any, Any] | None = None,
) -> Accuracy:
    """Dequantized-export accuracy (weights only) against the original, computed in ``dtype`` (float32
    unless given) on ``device``, streamed module by module (see ``streamed_logits``): memory does not
    grow with the model. The gate itself runs the exports with the runtime's numerics (``quantize.runtime``).

    ``reference`` is ``(logits, batch)``: the original's logits on the held-out batch, already taken in
    ``dtype`` (a quantize run takes them from the loaded model before calibrating; a streamed pass of the
    original gives the same logits bit for bit, which a test holds). Without it, that pass is run here.
    """
    ref, batch = reference if reference is not None else reference_logits(original_dir, device, dtype)
    q = streamed_logits(original_dir, DequantizedExport(export_dir, device), batch, device, dtype).cpu()
    return compare(ref, q, batch, "dequant", dtype)


def gate(acc: Accuracy, limits: Any, *, diagnostic: Accuracy | None = None) -> None:
    """Raise AccuracyGateError when any metric of ``acc`` (the exported weights' figure) is over the spec's
    threshold; ``diagnostic`` (the fake-quant figure) is named in the message, never judged."""
    fails = failures(acc, limits)
    if fails:
        beside = ""
        if diagnostic is not None:
            beside = (
                f" (fake-quant, not judged: top-1 {diagnostic.top1_agreement:.4f}, "
                f"rel logit err {diagnostic.rel_logit_error:.4f}, ppl {diagnostic.ppl_increase:+.2%})"
            )
        raise AccuracyGateError(f"accuracy gate failed ({acc.method}): " + "; ".join(fails) + beside)


def shown(value: float, limit: float, *, percent: bool = False) -> tuple[str, str]:
    """``value`` and ``limit`` printed with enough digits that they differ when they are not equal (4 decimals
    at least, 2 for a percentage): 0.6968 against 0.7000, never 0.70 against 0.7."""
    kind, least = ("%", 2) if percent else ("f", 4)
    digits = least
    if value != limit and math.isfinite(value) and math.isfinite(limit):
        while digits < 17 and f"{value:.{digits}{kind}}" == f"{limit:.{digits}{kind}}":
            digits += 1
    return f"{value:.{digits}{kind}}", f"{limit:.{digits}{kind}}"


def beside(manifest_accuracy: dict[str, Any]) -> str:
    """The fake-quant diagnostic a manifest's accuracy block holds, as a phrase (empty when there is none)."""
    fake = manifest_accuracy.get("fakequant")
    if not fake or manifest_accuracy.get("gate") == "fakequant":
        return ""
    return f" (fake-quant, not judged: top-1 {fake['top1_agreement']:.4f})"


def judged(manifest_accuracy: dict[str, Any]) -> str:
    """What decided, as a label: ``runtime hf/`` (the runtime-numerics gate and the export whose figure is shown),
    or an older manifest's gate name (``dequant``, ``fakequant``)."""
    gate = str(manifest_accuracy.get("gate"))
    export = (manifest_accuracy.get(gate) or {}).get("export")
    return f"{gate} {export}/" if export else gate


def from_json(d: dict[str, Any]) -> Accuracy:
    """An Accuracy from its manifest form (``to_json``)."""
    names = ("method", "rel_logit_error", "top1_agreement", "ppl_original", "ppl_quantized", "tokens", "dtype")
    return Accuracy(**{k: d[k] for k in names if k in d})


def failures(acc: Accuracy, limits: Any) -> list[str]:
    """Each metric over its threshold in ``limits`` (an AccuracyGate), as a phrase; empty when all pass."""
    fails = []
    if not math.isfinite(acc.ppl_original):
        fails.append(f"the original model's logits are not finite in {acc.dtype} (NaN or infinity); try dtype bfloat16")
    elif not all(math.isfinite(v) for v in (acc.rel_logit_error, acc.top1_agreement, acc.ppl_quantized)):
        fails.append("the quantized model's logits are not finite (NaN or infinity)")
    if acc.rel_logit_error > limits.max_rel_logit_error:
        v, lim = shown(acc.rel_logit_error, limits.max_rel_logit_error)
        fails.append(f"relative logit error {v} > {lim}")
    if acc.top1_agreement < limits.min_top1_agreement:
        v, lim = shown(acc.top1_agreement, limits.min_top1_agreement)
        fails.append(f"top-1 agreement {v} < {lim}")
    if acc.ppl_increase > limits.max_ppl_increase:
        v, lim = shown(acc.ppl_increase, limits.max_ppl_increase, percent=True)
        fails.append(f"perplexity +{v} > +{lim}")
    return fails
