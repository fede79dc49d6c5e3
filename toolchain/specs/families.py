"""The decoder families the toolchain names, and what it can do with each on each runtime.

One table (``FAMILIES``) decides, for a family, a runtime and a weight format, whether the whole path
works (quantize → build → serve), works with a caveat, or is refused — with the reason and the upstream
file it comes from (docs/model-families.md holds the sources; the support table there and in the README
is generated from this module and held equal to it by tests/specs/test_families.py).

- runtime ``tensorrt`` reads a TensorRT-LLM checkpoint: a quantized one from ModelOpt's
  ``export_tensorrt_llm_checkpoint`` (``modelopt/torch/export/model_config_export.py`` and
  ``tensorrt_llm_utils.py`` in nvidia-modelopt 0.47.0), an unquantized one from TensorRT-LLM's per-model
  ``convert_checkpoint.py`` (``CONVERTERS``); ``trtllm-build`` needs the
  architecture in ``MODEL_MAP`` (``tensorrt_llm/models/__init__.py``).
- runtime ``pytorch`` reads a Hugging Face checkpoint: the source, or ModelOpt's unified HF export
  (``export_hf_checkpoint``), loaded by the PyTorch backend's model for the architecture
  (``tensorrt_llm/_torch/models/``).

Every ModelOpt weight format takes the same export path, so the quantized formats share one verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.specs.base import Problem

if TYPE_CHECKING:
    from toolchain.specs.models import EngineSpec

RUNTIMES = ("tensorrt", "pytorch")
UNQUANTIZED = ("bf16", "fp16")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""  # why it is refused, or the caveat when ok
    fix: str = ""  # the alternative, when refused
    source: str = ""  # the upstream fact it rests on (docs/model-families.md)

    @property
    def label(self) -> str:
        if not self.ok:
            return "refused"
        return "yes (caveat)" if self.reason else "yes"


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json model_type
    architecture: str  # config.json architectures[0]
    name: str
    decoder_type: str | None  # ModelOpt's decoder_type for the TensorRT-LLM checkpoint export; None: no export
    tensorrt_quantized: Verdict
    pytorch: Verdict  # quantized (the unified HF export) and unquantized (the source) alike
    moe: bool = False


_OK = Verdict(True)
_FUSED = (
    "ModelOpt 0.47's TensorRT-LLM checkpoint exporter cannot read the fused experts Transformers 5 builds "
    "(build_moe_config: TypeError, object of type '{cls}' has no len())"
)
_SRC_MO_TRT = "nvidia-modelopt 0.47.0 modelopt/torch/export/tensorrt_llm_utils.py convert_to_tensorrt_llm_config"
_SRC_MO_LAYER = "nvidia-modelopt 0.47.0 modelopt/torch/export/layer_utils.py build_moe_config"
_SRC_MO_TYPES = "nvidia-modelopt 0.47.0 modelopt/torch/export/model_utils.py MODEL_NAME_TO_TYPE"
_SRC_PT = "NVIDIA/TensorRT-LLM docs/source/models/supported-models.md@00b6d5a (PyTorch backend table)"
_ALT_PT = "use runtime: pytorch (the unified HF checkpoint), or weights: bf16 on tensorrt"
_ALT_PT_ONLY = "use runtime: pytorch (ModelOpt's unified HF checkpoint serves it)"


def _refused(reason: str, fix: str, source: str) -> Verdict:
    return Verdict(False, reason, fix, source)


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in [
        Family("llama", "LlamaForCausalLM", "Llama", "llama", _OK, _OK),
        Family("mistral", "MistralForCausalLM", "Mistral", "llama", _OK, _OK),
        Family(
            "mixtral",
            "MixtralForCausalLM",
            "Mixtral",
            None,
            _refused(_FUSED.format(cls="QuantMixtralExperts"), _ALT_PT, _SRC_MO_LAYER),
            _OK,
            moe=True,
        ),
        Family("qwen2", "Qwen2ForCausalLM", "Qwen2 / Qwen2.5", "qwen", _OK, _OK),
        Family("qwen3", "Qwen3ForCausalLM", "Qwen3", "qwen", _OK, _OK),
        Family(
            "qwen2_moe",
            "Qwen2MoeForCausalLM",
            "Qwen2-MoE",
            None,
            _refused(_FUSED.format(cls="QuantQwen2MoeExperts"), _ALT_PT_ONLY, _SRC_MO_LAYER),
            Verdict(
                True,
                "the PyTorch backend registers Qwen2MoeForCausalLM (_torch/models/modeling_qwen_moe.py) but its "
                "supported-models table does not list it",
                source="NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_qwen_moe.py",
            ),
            moe=True,
        ),
        Family(
            "qwen3_moe",
            "Qwen3MoeForCausalLM",
            "Qwen3-MoE",
            None,
            _refused(
                "ModelOpt 0.47 has no TensorRT-LLM checkpoint export for decoder qwen3moe, and TensorRT-LLM's "
                "MODEL_MAP has no Qwen3MoeForCausalLM",
                _ALT_PT_ONLY,
                f"{_SRC_MO_TRT}; NVIDIA/TensorRT-LLM tensorrt_llm/models/__init__.py@02267d3 MODEL_MAP",
            ),
            _OK,
            moe=True,
        ),
        Family(
            "gemma",
            "GemmaForCausalLM",
            "Gemma",
            "gemma",
            _OK,
            _refused(
                "TensorRT-LLM's PyTorch backend has no Gemma (1) model (Gemma3 only)",
                "use runtime: tensorrt",
                _SRC_PT,
            ),
        ),
        Family(
            "gemma2",
            "Gemma2ForCausalLM",
            "Gemma 2",
            None,
            _refused(
                "ModelOpt 0.47 cannot export a TensorRT-LLM checkpoint for gemma2 (NotImplementedError)",
                "convert it with TensorRT-LLM's own examples/models/core/gemma/convert_checkpoint.py outside "
                "the toolchain, or move to Gemma 3 on runtime: pytorch",
                _SRC_MO_TRT,
            ),
            _refused(
                "TensorRT-LLM 1.2's PyTorch backend has no Gemma2 model (Gemma3 only)",
                "move to Gemma 3 (runtime: pytorch)",
                _SRC_PT,
            ),
        ),
        Family(
            "phi3",
            "Phi3ForCausalLM",
            "Phi-3 / Phi-4",
            None,
            _refused(
                "ModelOpt 0.47 cannot export a TensorRT-LLM checkpoint for phi3 (NotImplementedError)",
                _ALT_PT_ONLY,
                _SRC_MO_TRT,
            ),
            _OK,
        ),
        Family(
            "granite",
            "GraniteForCausalLM",
            "Granite",
            None,
            _refused(
                "ModelOpt 0.47 has no decoder type for Granite, so it writes no TensorRT-LLM checkpoint (a "
                "Llama one would drop Granite's embedding, residual, attention and logits multipliers)",
                "no quantized path in this toolchain; serve it unquantized with TensorRT-LLM's AutoDeploy",
                _SRC_MO_TYPES,
            ),
            _refused(
                "TensorRT-LLM's PyTorch backend serves Granite only through AutoDeploy, which the LLM-API "
                "repository does not configure",
                "no supported runtime in this toolchain yet",
                _SRC_PT,
            ),
        ),
        Family(
            "olmo2",
            "Olmo2ForCausalLM",
            "OLMo 2",
            None,
            _refused(
                "ModelOpt 0.47 has no decoder type for OLMo2 and TensorRT-LLM's MODEL_MAP has no Olmo2ForCausalLM",
                "no supported runtime in this toolchain",
                f"{_SRC_MO_TYPES}; NVIDIA/TensorRT-LLM tensorrt_llm/models/__init__.py@02267d3 MODEL_MAP",
            ),
            _refused(
                "TensorRT-LLM's PyTorch backend has no OLMo2 model (OLMo 3 only, through AutoDeploy)",
                "no supported runtime in this toolchain",
                _SRC_PT,
            ),
        ),
    ]
}
BY_ARCHITECTURE = {f.architecture: f for f in FAMILIES.values()}
# The offline catalog's entries (specs.arch.CATALOG) and their families.
CATALOG_FAMILY = {
    "llama-3.1-8b": "llama",
    "llama-3-70b": "llama",
    "llama-3.3-70b": "llama",
    "mistral-7b-v0.3": "mistral",
    "qwen2.5-7b": "qwen2",
    "mixtral-8x7b": "mixtral",
}


# HF architecture -> the per-model converter an unquantized checkpoint needs (TensorRT-LLM examples/models/core/*),
# which `toolchain build` runs for runtime tensorrt with bf16/fp16 weights (compile/synth.py).
CONVERTERS = {
    "LlamaForCausalLM": "examples/models/core/llama/convert_checkpoint.py",
    "MistralForCausalLM": "examples/models/core/llama/convert_checkpoint.py",
    "MixtralForCausalLM": "examples/models/core/llama/convert_checkpoint.py",
    "Qwen2ForCausalLM": "examples/models/core/qwen/convert_checkpoint.py",
}


AWQ = ("int4_awq", "w4a8_awq")
_MOE_AWQ = _refused(
    "ModelOpt 0.47's AWQ export cannot walk the fused experts Transformers 5 builds (get_experts_list: "
    "TypeError, object of type 'Quant…Experts' has no len())",
    "use weights: fp8 (or int8_sq, nvfp4) for this mixture-of-experts model",
    "nvidia-modelopt 0.47.0 modelopt/torch/export/unified_export_hf.py requantize_resmooth_fused_llm_layers",
)


def verdict(family: Family, runtime: str, weights: str) -> Verdict:
    """Whether ``family`` goes end to end on ``runtime`` with ``weights``."""
    if family.moe and weights in AWQ and (runtime == "pytorch" or family.tensorrt_quantized.ok):
        return _MOE_AWQ if family.pytorch.ok else family.pytorch
    if runtime == "pytorch":
        return family.pytorch
    if weights in UNQUANTIZED:
        if family.architecture in CONVERTERS:
            return _OK
        return _refused(
            f"no TensorRT-LLM converter for an unquantized {family.architecture} is driven by this toolchain",
            "quantize it (weights: fp8 or int4_awq)"
            if family.tensorrt_quantized.ok
            else "use runtime: pytorch"
            if family.pytorch.ok
            else "no supported runtime in this toolchain",
            "toolchain/specs/families.py CONVERTERS (TensorRT-LLM examples/models/core/*/convert_checkpoint.py)",
        )
    return family.tensorrt_quantized


def family_of_config(cfg: dict[str, Any]) -> Family | None:
    """The family of a config.json (by model_type, else by architecture), or None."""
    mtype = cfg.get("model_type")
    if isinstance(mtype, str) and mtype in FAMILIES:
        return FAMILIES[mtype]
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return BY_ARCHITECTURE.get(archs[0])
    return None


def problem(cfg: dict[str, Any], runtime: str, weights: str) -> tuple[str, str] | None:
    """(message, fix) when the toolchain cannot take this config's model on ``runtime`` with ``weights``."""
    fam = family_of_config(cfg)
    if fam is None:
        mtype = cfg.get("model_type") or (cfg.get("architectures") or [None])[0]
        if mtype is None:  # a config that names no family (the planner takes it as Llama-shaped)
            return None
        return (
            f"model_type {str(mtype)[:60]!r} is not a family this toolchain plans, quantizes or serves",
            f"supported families: {', '.join(FAMILIES)} (docs/model-families.md)",
        )
    v = verdict(fam, runtime, weights)
    if v.ok:
        return None
    what = "unquantized" if weights in UNQUANTIZED else weights
    return f"{fam.name} ({fam.model_type}) on runtime {runtime} with {what} weights: {v.reason}", v.fix


# The table's columns: (runtime, the weight formats the column stands for, the one it is judged by).
COLUMNS = (
    ("tensorrt", "fp8, int8, nvfp4", "fp8"),
    ("tensorrt", "int4_awq, w4a8_awq", "int4_awq"),
    ("tensorrt", "bf16", "bf16"),
    ("pytorch", "fp8, int8, nvfp4", "fp8"),
    ("pytorch", "int4_awq, w4a8_awq", "int4_awq"),
    ("pytorch", "bf16", "bf16"),
)


def support_table() -> str:
    """The family × runtime × weight-format table (Markdown), as docs/model-families.md and the README show it."""
    head = " | ".join(f"{r}: {what}" for r, what, _ in COLUMNS)
    lines = [f"| family | `model_type` | {head} |", "|---|---|" + "---|" * len(COLUMNS)]
    for f in FAMILIES.values():
        cells = [verdict(f, r, w).label for r, _, w in COLUMNS]
        moe = " (MoE)" if f.moe else ""
        lines.append(f"| {f.name}{moe} | `{f.model_type}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reasons_table() -> str:
    """Every refusal and caveat of the support table, with its alternative and upstream source (Markdown)."""
    lines = ["| family | where | reason | alternative | source |", "|---|---|---|---|---|"]
    for f in FAMILIES.values():
        seen: list[tuple[str, Verdict]] = []
        for r, what, w in COLUMNS:
            v = verdict(f, r, w)
            if v.reason and v not in (s for _, s in seen):
                seen.append((f"{r}: {what}", v))
        for where, v in seen:
            lines.append(f"| {f.name} | {where} | {v.reason} | {v.fix or '—'} | {v.source} |")
    return "\n".join(lines)


def spec_config(spec: Any) -> dict[str, Any] | None:
    """The config.json of a spec's model when it is at hand offline (a local checkpoint, the catalog's family
    for model.architecture, or an hf:// source's config in the Hub cache); None when it is not."""
    from toolchain.errors import ModelConfigError
    from toolchain.specs.checkpoint import read_config_json

    local = spec.local_source()
    if local is not None and (local / "config.json").is_file():
        try:
            return read_config_json(local / "config.json")
        except ModelConfigError:
            return None  # the planner and quantize report a broken config.json themselves
    name = spec.model.architecture
    if name in CATALOG_FAMILY:
        return {"model_type": CATALOG_FAMILY[name]}
    if spec.model.is_hf:  # a config.json already in the Hugging Face cache; never the network here
        import contextlib

        with contextlib.suppress(Exception):
            from huggingface_hub import hf_hub_download

            repo, rev = spec.model.hf_repo_revision()
            cached = hf_hub_download(repo, "config.json", revision=rev, local_files_only=True)
            with contextlib.suppress(ModelConfigError):
                return read_config_json(Path(cached))
    return None


def spec_problem(spec: EngineSpec) -> Problem | None:
    """What ``spec validate`` says about the spec's model family on its runtime and weight format."""
    cfg = spec_config(spec)
    if cfg is None:
        return None
    found = problem(cfg, spec.runtime, spec.quantization.weights)
    return None if found is None else Problem(None, *found)


if __name__ == "__main__":  # python -m toolchain.specs.families: the tables for docs/model-families.md
    print(support_table())
    print()
    print(reasons_table())
