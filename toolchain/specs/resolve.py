"""What a cell's build options resolve to: the options passed to ``trtllm-build`` after TensorRT-LLM's own
adjustments (docs/trtllm-build.md), and so what the built engine will record. The build stage passes them;
the Triton stage predicts an engine from them when none is built yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolchain.errors import CompatibilityError
from toolchain.specs.matrix import Cell

FP8_CTX_QUANT = ("fp8", "w4a8_awq", "nvfp4")  # quant that keeps FP8 context FMHA (builder.py)
# Architectures TensorRT-LLM applies reduce_fusion to (docs/trtllm-build.md, automatic adjustments, item 2).
REDUCE_FUSION_ARCHS = ("LlamaForCausalLM", "Gemma2ForCausalLM", "MedusaForCausalLM")


@dataclass(frozen=True)
class Resolved:
    """The build options after every rule: what we pass, and what the engine will record."""

    dtype: str
    gemm_plugin: str
    use_paged_context_fmha: bool
    use_fp8_context_fmha: bool
    reduce_fusion: bool
    max_num_tokens: int
    tokens_per_block: int
    multiple_profiles: bool
    kv_cache_type: str


def resolve(cell: Cell, architecture: str = "LlamaForCausalLM") -> Resolved:
    spec, gpu = cell.spec, cell.gpu
    q, b = spec.quantization, spec.build
    dtype = spec.model.dtype
    if b.gemm_plugin is not None:
        gemm = b.gemm_plugin
    elif q.weights == "fp8":
        gemm = "disable"  # perf guide: GEMM plugin off for FP8
    elif q.weights == "nvfp4":
        gemm = "nvfp4"
    else:
        gemm = "auto"
    if q.weights == "nvfp4" and gemm not in ("nvfp4", "disable"):
        raise CompatibilityError(
            f"NVFP4 builds use the nvfp4 GEMM plugin; build.gemm_plugin {gemm} is not allowed",
            "remove build.gemm_plugin or set it to nvfp4",
        )
    # builder.py's order of adjustments (docs/trtllm-build.md, automatic adjustments, item 4)
    kv_fp8 = q.kv_cache == "fp8"
    paged = b.use_paged_context_fmha is not False
    fp8_ctx = b.use_fp8_context_fmha is not False
    if q.weights not in FP8_CTX_QUANT:
        fp8_ctx = False
        paged = paged and not kv_fp8
    if gpu.sm < 89:
        fp8_ctx = False
        paged = paged and not kv_fp8
    if paged:
        fp8_ctx = kv_fp8
    if q.kv_cache == "int8":
        paged = False
    reduce = b.reduce_fusion and cell.tp > 1 and architecture in REDUCE_FUSION_ARCHS
    tokens = min(b.max_num_tokens, cell.max_seq_len * cell.max_batch_size)
    tokens = max(tokens, b.tokens_per_block)
    return Resolved(
        dtype, gemm, paged, fp8_ctx, reduce, tokens, b.tokens_per_block, b.multiple_profiles, b.kv_cache_type
    )
