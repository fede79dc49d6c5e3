"""The accuracy gate's forward: an exported checkpoint run with the numerics of the runtime that serves it.

Each quantized Linear of the export is run as TensorRT-LLM runs it (docs/quantize.md, "Runtime numerics"):

- weights dequantized with their ``weight_scale`` (the packing of ``accuracy.DequantizedExport``);
- the input multiplied by the layer's ``pre_quant_scale`` (SmoothQuant's and AWQ's per-channel pre-scale),
  then, where the format quantizes activations, quantized with the exported static per-tensor ``input_scale``:
  FP8 ``fp8_e4m3(clamp(x / s, ±448)) · s``, INT8 ``clamp(round(x / s), ±127) · s``, NVFP4 per 16-element block
  ``e2m1(x / (fp8(amax_block / 6 / s) · s)) · fp8(...) · s``;
- with an FP8 KV cache, K (after RoPE) and V quantized and dequantized with the exported KV scale before
  attention reads them: ``k_scale`` / ``v_scale`` in the unified HF checkpoint, the one
  ``kv_cache_scaling_factor`` of each layer in the TensorRT-LLM checkpoint (the engine's attention has that
  single scale).

Both exports are read back: ``hf/`` (the unified HF checkpoint) in its own names, ``trtllm/`` (TensorRT-LLM's
``rank{N}.safetensors``) translated to the Hugging Face names of the original architecture: fused
``attention.qkv`` split into q/k/v rows, ``mlp.fc`` = gate_proj, ``mlp.gate`` = up_proj, ``mlp.proj`` =
down_proj, TP shards joined (column-parallel along the output, row-parallel along the input dimension).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import QuantizeError
from toolchain.quantize.accuracy import E2M1, Accuracy, CheckpointTensors, DequantizedExport

# The gate that judged a quantized checkpoint, recorded in its manifest (``accuracy.gate_version``).
GATE_VERSION = "runtime-numerics/1"
FP8_MAX = 448.0
INT8_MAX = 127.0
NVFP4_BLOCK = 16
# quant_algo -> how the runtime quantizes a Linear's input (formats not named here are weight-only)
ACTIVATIONS = {"FP8": "fp8", "W8A8_SQ_PER_CHANNEL": "int8", "W4A8_AWQ": "fp8", "NVFP4": "nvfp4"}
_ATTENTION = "toolchain_runtime_kv"


@dataclass(frozen=True)
class LinearQuant:
    """How the runtime feeds one quantized Linear: its input pre-scale and activation quantization."""

    activation: str | None  # "fp8", "int8", "nvfp4", or None (weight-only)
    input_scale: Any = None  # float32 scalar tensor
    pre_quant_scale: Any = None  # [in], or None


def fake_fp8(x: Any, scale: Any) -> Any:
    """Static per-tensor FP8 (e4m3) quantize-dequantize of ``x`` with ``scale``, in ``x``'s dtype."""
    import torch

    q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * scale).to(x.dtype)


def fake_int8(x: Any, scale: Any) -> Any:
    """Static per-tensor INT8 quantize-dequantize of ``x`` with ``scale`` (round to nearest, clamp ±127)."""
    return ((x.float() / scale).round().clamp(-INT8_MAX, INT8_MAX) * scale).to(x.dtype)


def fake_nvfp4(x: Any, global_scale: Any) -> Any:
    """NVFP4 quantize-dequantize of ``x`` along its last dimension: blocks of 16 share an FP8 scale of their
    amax ÷ 6, stored relative to the per-tensor ``global_scale``; values round to the nearest E2M1 value."""
    import torch

    shape = x.shape
    blocks = x.float().reshape(-1, NVFP4_BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    block_scale = (amax / 6.0 / global_scale).clamp(max=FP8_MAX).to(torch.float8_e4m3fn).float() * global_scale
    values = torch.tensor(E2M1[:8], device=x.device)  # the non-negative E2M1 values, ascending
    scaled = torch.where(block_scale > 0, blocks / block_scale, torch.zeros_like(blocks)).clamp(-6.0, 6.0)
    nearest = (scaled.abs().unsqueeze(-1) - values).abs().argmin(dim=-1)
    q = values[nearest] * scaled.sign()
    return (q * block_scale).reshape(shape).to(x.dtype)


def quantize_input(x: Any, lq: LinearQuant) -> Any:
    """A Linear's input as the runtime computes with it: pre-scaled, then quantized per ``lq.activation``."""
    if lq.pre_quant_scale is not None:
        x = x * lq.pre_quant_scale.to(x.dtype)
    if lq.activation == "fp8":
        return fake_fp8(x, lq.input_scale)
    if lq.activation == "int8":
        return fake_int8(x, lq.input_scale)
    if lq.activation == "nvfp4":
        return fake_nvfp4(x, lq.input_scale)
    return x


class HFRuntime(DequantizedExport):
    """The unified HF export (``hf/``) as the runtime reads it: weights dequantized without the pre-scale (it
    applies to the input), with each Linear's input quantization and each layer's KV scales."""

    export = "hf"

    def __init__(self, root: Path, device: str) -> None:
        super().__init__(root, device)
        qcfg = json.loads((root / "hf_quant_config.json").read_text())["quantization"]
        self.kv_algo = qcfg.get("kv_cache_quant_algo")
        self.fold_pre_quant_scale = False

    def linear(self, base: str) -> LinearQuant | None:
        pqs = self.get_aux(f"{base}.pre_quant_scale") if f"{base}.pre_quant_scale" in self else None
        if f"{base}.weight_scale" not in self:
            return LinearQuant(None, None, pqs) if pqs is not None else None
        act = ACTIVATIONS.get(self.algo or "")
        if act is None:
            return LinearQuant(None, None, pqs)
        if f"{base}.input_scale" not in self:
            raise QuantizeError(f"{self.root}: {base} has no input_scale, which {self.algo} needs")
        return LinearQuant(act, self.get_aux(f"{base}.input_scale"), pqs)

    def kv_scales(self, attention: str) -> tuple[Any, Any] | None:
        if self.kv_algo != "FP8":
            return None
        k, v = f"{attention}.k_proj.k_scale", f"{attention}.v_proj.v_scale"
        if k not in self or v not in self:
            raise QuantizeError(f"{self.root}: {attention} has no k_scale/v_scale, which an FP8 KV cache needs")
        return self.get_aux(k), self.get_aux(v)


# TensorRT-LLM checkpoint names (of a llama-style decoder, as ModelOpt's exporter writes them) -> HF names.
_TRT_LAYER = {
    "input_layernorm.weight": ("input_layernorm.weight", None),
    "post_layernorm.weight": ("post_attention_layernorm.weight", None),
    "attention.dense": ("self_attn.o_proj", 1),
    "mlp.fc": ("mlp.gate_proj", 0),
    "mlp.gate": ("mlp.up_proj", 0),
    "mlp.proj": ("mlp.down_proj", 1),
}
_TRT_SCALES = {
    "weights_scaling_factor": "weight_scale",
    "weights_scaling_factor_2": "weight_scale_2",
    "activation_scaling_factor": "input_scale",
    "prequant_scaling_factor": "pre_quant_scale",
}


class TrtllmRuntime:
    """The TensorRT-LLM checkpoint (``trtllm/``) in the Hugging Face names of the original architecture, with the
    numerics the engine runs: per-rank dequantization, TP shards joined, one KV scale per layer."""

    export = "trtllm"

    def __init__(self, root: Path, device: str) -> None:
        self.root, self.device = root, device
        cfg = json.loads((root / "config.json").read_text())
        if cfg.get("decoder") not in (None, "llama") or cfg.get("architecture") not in (
            "LlamaForCausalLM",
            "MistralForCausalLM",
        ):
            raise QuantizeError(
                f"{root}: judging a TensorRT-LLM checkpoint of {cfg.get('architecture')} is not supported",
                "only llama-style decoders (Llama, Mistral) are read back",
            )
        mapping = cfg.get("mapping") or {}
        self.tp, pp = int(mapping.get("tp_size", 1)), int(mapping.get("pp_size", 1))
        if pp != 1:
            raise QuantizeError(
                f"{root}: judging a pipeline-parallel TensorRT-LLM checkpoint (pp={pp}) is not supported"
            )
        q = cfg.get("quantization") or {}
        self.algo, self.kv_algo = q.get("quant_algo"), q.get("kv_cache_quant_algo")
        self.group = int(q.get("group_size") or 128)
        self.heads, self.kv_heads = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
        self.head = int(cfg.get("head_size") or cfg["hidden_size"] // self.heads)
        if self.heads % self.tp or self.kv_heads % self.tp:
            raise QuantizeError(
                f"{root}: {self.heads} query / {self.kv_heads} KV heads do not split evenly over tp={self.tp} "
                "(replicated KV heads are not read back)"
            )
        # the embedding table is split over the TP ranks only with use_parallel_embedding (along its vocab rows
        # with embedding_sharding_dim 0); otherwise every rank holds all of it
        self.embedding_dim: int | None = None
        if cfg.get("use_parallel_embedding") and self.tp > 1:
            self.embedding_dim = int(cfg.get("embedding_sharding_dim", 0))
        self.ranks = [
            DequantizedRank(root, f"rank{r}.safetensors", device, self.algo, self.group) for r in range(self.tp)
        ]
        self._map: dict[str, tuple[str, int | None, int | None]] = {}  # HF name -> (TRT base, split dim, qkv part)
        for name in self.ranks[0].names():
            self._add(name)

    def _add(self, name: str) -> None:
        if name == "transformer.vocab_embedding.weight":
            self._map["model.embed_tokens.weight"] = (name, self.embedding_dim, None)
        elif name == "transformer.ln_f.weight":
            self._map["model.norm.weight"] = (name, None, None)
        elif name == "lm_head.weight":
            self._map["lm_head.weight"] = (name, 0, None)
        elif name.startswith("transformer.layers."):
            idx, _, rest = name[len("transformer.layers.") :].partition(".")
            if rest == "attention.qkv.weight":
                for part, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                    self._map[f"model.layers.{idx}.self_attn.{proj}.weight"] = (name, 0, part)
                return
            for trt, (hf, dim) in _TRT_LAYER.items():
                if rest == trt:
                    self._map[f"model.layers.{idx}.{hf}"] = (name, dim, None)
                elif rest == f"{trt}.weight":
                    self._map[f"model.layers.{idx}.{hf}.weight"] = (name, dim, None)

    def __contains__(self, name: str) -> bool:
        return name in self._map

    def _qkv_rows(self, tp: int) -> tuple[int, int, int]:
        q, kv = self.heads // tp * self.head, self.kv_heads // tp * self.head
        return q, kv, kv

    def get(self, name: str, dtype: Any = None) -> Any:
        import torch

        trt, dim, part = self._map[name]
        pieces = [r.get(trt) for r in self.ranks]
        if part is not None:
            rows = self._qkv_rows(self.tp)
            pieces = [torch.split(p, list(rows), dim=0)[part] for p in pieces]
        w = pieces[0] if len(pieces) == 1 or dim is None else torch.cat(pieces, dim=dim)
        return w if dtype is None else w.to(dtype)

    def _trt_base(self, base: str) -> tuple[str, int | None] | None:
        found = self._map.get(f"{base}.weight")
        return None if found is None else (found[0][: -len(".weight")], found[1])

    def linear(self, base: str) -> LinearQuant | None:
        import torch

        found = self._trt_base(base)
        if found is None:
            return None
        trt, dim = found
        r0 = self.ranks[0]
        pqs = None
        if f"{trt}.prequant_scaling_factor" in r0:
            parts = [r.get_aux(f"{trt}.prequant_scaling_factor") for r in self.ranks]
            pqs = torch.cat(parts) if dim == 1 and len(parts) > 1 else parts[0]
        if f"{trt}.weights_scaling_factor" not in r0:
            return LinearQuant(None, None, pqs) if pqs is not None else None
        act = ACTIVATIONS.get(self.algo or "")
        if act is None:
            return LinearQuant(None, None, pqs)
        if f"{trt}.activation_scaling_factor" not in r0:
            raise QuantizeError(f"{self.root}: {trt} has no activation_scaling_factor, which {self.algo} needs")
        return LinearQuant(act, r0.get_aux(f"{trt}.activation_scaling_factor").reshape(()), pqs)

    def kv_scales(self, attention: str) -> tuple[Any, Any] | None:
        if self.kv_algo != "FP8":
            return None
        idx = attention.split(".")[2]  # model.layers.N.self_attn
        name = f"transformer.layers.{idx}.attention.kv_cache_scaling_factor"
        if name not in self.ranks[0]:
            raise QuantizeError(f"{self.root}: layer {idx} has no kv_cache_scaling_factor, which an FP8 KV cache needs")
        s = self.ranks[0].get_aux(name).reshape(())
        return s, s


class DequantizedRank(DequantizedExport):
    """One ``rank{N}.safetensors`` of a TensorRT-LLM checkpoint, dequantized with ``accuracy.DequantizedExport``'s
    packing (ModelOpt writes the same layouts there under TensorRT-LLM's scale names)."""

    def __init__(self, root: Path, file: str, device: str, algo: str | None, group: int) -> None:
        from safetensors import safe_open

        self.root, self.device = root, device
        self._pickled = {}
        with safe_open(str(root / file), framework="pt") as h:  # this rank's file only: every rank has the names
            self._files = dict.fromkeys(h.keys(), root / file)
        self.algo, self.group = algo, group
        self.fold_pre_quant_scale = False
        self._aliases: dict[str, str] = {}
        for n in list(self._files):
            stem, _, leaf = n.rpartition(".")
            if leaf in _TRT_SCALES:
                self._files[f"{stem}.{_TRT_SCALES[leaf]}"] = self._files[n]
                self._aliases[f"{stem}.{_TRT_SCALES[leaf]}"] = n

    def raw(self, name: str) -> Any:
        return super().raw(self._aliases.get(name, name))


def runtime_logits(original_dir: Path, export: Any, batch: Any, device: str, dtype: Any = None) -> Any:
    """Logits of ``original_dir``'s architecture run on ``export`` (an ``HFRuntime`` or ``TrtllmRuntime``) with
    the runtime's numerics: Linear inputs pre-scaled and quantized, K and V quantized with the KV scales."""
    from toolchain.quantize.accuracy import streamed_logits

    return streamed_logits(original_dir, export, batch, device, dtype, instrument=lambda m: instrument(m, export))


def instrument(model: Any, export: Any) -> None:
    """Hook ``model`` (built from the original's config, weights streamed from ``export``) to run the export's
    activation and KV-cache quantization."""
    import torch

    from toolchain.quantize.accuracy import stored_names

    for mname, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            stored = stored_names(f"{mname}.weight", export)
            if isinstance(stored, str) and stored.endswith(".weight"):
                lq = export.linear(stored[: -len(".weight")])
                if lq is not None and (lq.activation is not None or lq.pre_quant_scale is not None):
                    mod.register_forward_pre_hook(_input_hook(lq))
        if hasattr(mod, "layer_idx") and hasattr(mod, "k_proj") and hasattr(mod, "v_proj"):
            scales = export.kv_scales(mname)
            if scales is not None:
                mod._toolchain_kv_scales = scales
    if any(hasattr(m, "_toolchain_kv_scales") for m in model.modules()):
        _register_attention()
        base = model.config._attn_implementation or "sdpa"
        for m in model.modules():
            if hasattr(m, "_toolchain_kv_scales"):
                m._toolchain_attention = base
        model.config._attn_implementation = _ATTENTION


def _input_hook(lq: LinearQuant) -> Any:
    def hook(mod: Any, args: Any) -> Any:
        return (quantize_input(args[0], lq), *args[1:])

    return hook


def _register_attention() -> None:
    from transformers import AttentionInterface

    if _ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(_ATTENTION, _kv_quantized_attention)


def _kv_quantized_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """The model's own attention, reading K and V through an FP8 cache (quantized and dequantized with the
    layer's scales); K arrives here after RoPE, as the runtime writes it to the cache."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    scales = getattr(module, "_toolchain_kv_scales", None)
    if scales is not None:
        key, value = fake_fp8(key, scales[0]), fake_fp8(value, scales[1])
    base = getattr(module, "_toolchain_attention", "sdpa")
    if base == "eager":
        fn = sys.modules[type(module).__module__].eager_attention_forward
    else:
        fn = ALL_ATTENTION_FUNCTIONS[base]
    return fn(module, query, key, value, attention_mask, **kwargs)


# What the CPU stand-ins serve beside the dequantized weights of a unified HF export (quantize.dequant): the
# export's quantization config and scales, so that they run the Linear inputs and the KV cache as the gate does.
NUMERICS_DIR = "runtime-numerics"
NUMERICS = "runtime numerics (activation and KV quantization)"


def carry_numerics(export_hf: Path, dest: Path) -> None:
    """Write ``export_hf``'s quantization config and every scale the runtime reads (``DequantizedExport.AUX``)
    into ``dest`` (``<served weights>/runtime-numerics``), for ``ServedNumerics``."""
    from safetensors.torch import save_file

    src = DequantizedExport(export_hf, "cpu")
    scales = {n: src.raw(n).contiguous() for n in src._files if n.rsplit(".", 1)[-1] in DequantizedExport.AUX}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "hf_quant_config.json").write_bytes((export_hf / "hf_quant_config.json").read_bytes())
    save_file(scales, str(dest / "scales.safetensors"), metadata={"format": "pt"})


class ServedNumerics(HFRuntime):
    """A unified HF export as the CPU stand-ins serve it: its weights dequantized to float32 without the
    pre-scale (``weights_dir``, written by ``quantize.dequant``), its scales and quantization config carried
    beside them (``weights_dir/runtime-numerics``). ``instrument(model, ServedNumerics(...))`` gives the model
    loaded from ``weights_dir`` the numerics ``HFRuntime`` gives the gate."""

    def __init__(self, weights_dir: Path, device: str) -> None:
        super().__init__(weights_dir / NUMERICS_DIR, device)
        self.weights = CheckpointTensors(weights_dir, device)
        self._weight_names = set(self.weights._files)  # stored_names finds each Linear by its weight's name

    def __contains__(self, name: str) -> bool:
        return name in self._weight_names or super().__contains__(name)

    def names(self) -> list[str]:
        return sorted(self._weight_names)

    def get(self, name: str, dtype: Any = None) -> Any:
        """The served (already dequantized) weight."""
        return self.weights.get(name, dtype)


def served_numerics(weights_dir: Path, device: str = "cpu") -> ServedNumerics | None:
    """The runtime numerics carried with served weights, or None when they carry none (an unquantized
    checkpoint, the source served before quantize ran)."""
    if not (weights_dir / NUMERICS_DIR / "hf_quant_config.json").is_file():
        return None
    return ServedNumerics(weights_dir, device)


def instrument_served(model: Any, weights_dir: Path) -> str:
    """Give a stand-in's ``model`` (loaded from ``weights_dir``) the runtime numerics its weights carry; what it
    then serves. Both CPU stand-ins (triton_repo/) call it once they know the scales are there."""
    view = served_numerics(weights_dir)
    if view is None:
        raise QuantizeError(f"{weights_dir} carries no runtime numerics ({NUMERICS_DIR}/hf_quant_config.json)")
    instrument(model, view)
    return NUMERICS


def open_export(export_dir: Path, device: str) -> HFRuntime | TrtllmRuntime:
    """The runtime view of one export directory: ``hf/`` (a unified HF checkpoint) or ``trtllm/``."""
    if (export_dir / "hf_quant_config.json").is_file():
        return HFRuntime(export_dir, device)
    if any(export_dir.glob("rank*.safetensors")):
        return TrtllmRuntime(export_dir, device)
    raise QuantizeError(f"{export_dir} is neither a unified HF checkpoint nor a TensorRT-LLM checkpoint")


def check_exports(
    original_dir: Path,
    out_dir: Path,
    device: str = "cpu",
    *,
    dtype: Any = None,
    reference: tuple[Any, Any] | None = None,
) -> tuple[dict[str, Accuracy], list[str]]:
    """Each export under ``out_dir`` (``hf/``, ``trtllm/``) run with the runtime's numerics against the original
    (see ``accuracy.check_export`` for ``dtype`` and ``reference``). Returns the figures by export name, and notes
    for an export that cannot be read back here (it is then not judged, and the note says so)."""
    from toolchain.quantize.accuracy import compare, reference_logits

    results: dict[str, Accuracy] = {}
    notes: list[str] = []
    for name in ("hf", "trtllm"):
        d = out_dir / name
        if not d.is_dir():
            continue
        try:
            view = open_export(d, device)
        except QuantizeError as e:
            if name == "hf":
                raise
            notes.append(f"{name}/ not judged by the accuracy gate: {e.message}")
            continue
        if reference is None:
            reference = reference_logits(original_dir, device, dtype)
        ref, batch = reference
        q = runtime_logits(original_dir, view, batch, device, dtype).cpu()
        results[name] = compare(ref, q, batch, f"runtime:{name}", dtype)
    return results, notes


def deciding(results: dict[str, Accuracy], limits: Any) -> tuple[str, Accuracy]:
    """The export whose figure the manifest shows: the first that fails ``limits``, else the lowest top-1."""
    from toolchain.quantize.accuracy import failures

    for name, acc in results.items():
        if limits is not None and failures(acc, limits):
            return name, acc
    return min(results.items(), key=lambda kv: (kv[1].top1_agreement, -kv[1].rel_logit_error))


def gate(results: dict[str, Accuracy], limits: Any, *, diagnostic: Accuracy | None = None) -> None:
    """Raise AccuracyGateError when either export's runtime figure is over a threshold, naming the export;
    ``diagnostic`` (the fake-quant figure) is shown beside, never judged."""
    from toolchain.errors import AccuracyGateError
    from toolchain.quantize.accuracy import failures

    fails = [f"{name}/: {'; '.join(f)}" for name, acc in results.items() if (f := failures(acc, limits))]
    if fails:
        beside = ""
        if diagnostic is not None:
            beside = (
                f" (fake-quant, not judged: top-1 {diagnostic.top1_agreement:.4f}, "
                f"rel logit err {diagnostic.rel_logit_error:.4f}, ppl {diagnostic.ppl_increase:+.2%})"
            )
        raise AccuracyGateError("accuracy gate failed (runtime numerics) on " + " and ".join(fails) + beside)


def manifest_block(results: dict[str, Accuracy], limits: Any, fake: Accuracy | None) -> dict[str, Any]:
    """The manifest's ``accuracy``: the deciding export's figure under ``runtime``, every export's under
    ``exports``, the gate's version, and the fake-quant diagnostic."""
    name, acc = deciding(results, limits)
    return {
        "gate": "runtime",
        "gate_version": GATE_VERSION,
        "runtime": {**acc.to_json(), "export": name},
        "exports": {n: a.to_json() for n, a in results.items()},
        "fakequant": fake.to_json() if fake else None,
    }


@dataclass
class Verdict:
    """``toolchain accuracy``: an existing quantized checkpoint judged again by this gate."""

    quantized: Path
    results: dict[str, Accuracy]
    failures: dict[str, list[str]]  # export -> each threshold it misses (empty: it passes)
    notes: list[str]
    limits: Any
    recorded_gate: str | None  # the gate version its manifest names (None: judged by an older gate, or none)

    @property
    def passed(self) -> bool:
        return not any(self.failures.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "quantized": str(self.quantized),
            "gate_version": GATE_VERSION,
            "recorded_gate_version": self.recorded_gate,
            "passed": self.passed,
            "limits": self.limits.model_dump(),
            "exports": {
                n: {**a.to_json(), "failures": self.failures[n], "passed": not self.failures[n]}
                for n, a in self.results.items()
            },
            "notes": self.notes,
        }


def judge(checkpoint: Path, quantized: Path, limits: Any, *, device: str = "cpu") -> Verdict:
    """Run every export of ``quantized`` (what ``toolchain quantize --out`` wrote) with the runtime's numerics
    against the original ``checkpoint``, in the dtype its manifest's recipe names (bfloat16 without one), and
    set each export's figures against ``limits`` (an AccuracyGate). Nothing is written."""
    import torch

    from toolchain.quantize.accuracy import failures

    checkpoint, quantized = Path(checkpoint).resolve(), Path(quantized).resolve()
    if not (checkpoint / "config.json").is_file():
        raise QuantizeError(f"{checkpoint} has no config.json; it is not a Hugging Face checkpoint")
    manifest: dict[str, Any] = {}
    if (quantized / "manifest.json").is_file():
        try:
            manifest = json.loads((quantized / "manifest.json").read_text())
        except ValueError as e:
            raise QuantizeError(f"{quantized}/manifest.json is not JSON: {e}") from e
    if not (quantized / "hf").is_dir() and not (quantized / "trtllm").is_dir():
        raise QuantizeError(
            f"{quantized} holds neither hf/ nor trtllm/",
            "give the directory `toolchain quantize --out` wrote",
        )
    dtype: Any = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        str((manifest.get("recipe") or {}).get("dtype")), torch.bfloat16
    )
    if dtype == torch.float16 and device == "cpu":
        dtype = None  # float16 on the CPU is judged in float32, as quantize judges it there
    results, notes = check_exports(checkpoint, quantized, device, dtype=dtype)
    if not results:
        raise QuantizeError(f"no export of {quantized} can be judged here: {'; '.join(notes)}")
    recorded = (manifest.get("accuracy") or {}).get("gate_version")
    return Verdict(quantized, results, {n: failures(a, limits) for n, a in results.items()}, notes, limits, recorded)
