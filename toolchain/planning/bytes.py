"""Bytes of weights and KV cache, per precision and per rank.

- Weights: Linear layers at the weight format's bytes per parameter (FP8/INT8 1 B, INT4 0.5 B
  plus one FP16 scale per AWQ group, NVFP4 0.5 B plus one FP8 scale per 16 values, BF16 2 B);
  embeddings, lm_head and norms stay in the model dtype (ModelOpt's default excludes).
- Bytes read by one decode step: every weight except the input-embedding table, of which only the
  looked-up rows (one per sequence in the batch) are read; when the table is tied to ``lm_head``
  the whole matrix is read anyway (by the output projection), so it counts in full.
- Mixture of experts: a decode step reads, per MoE layer, only the experts the batch's tokens are routed
  to: k of E at batch 1, E·(1 − (1 − k/E)^batch) in expectation under uniform routing; everything else
  (attention, routers, shared experts) in full.
- KV cache per token = 2 (K and V) × layers × KV heads × head dim × bytes of the KV dtype.
"""

from __future__ import annotations

from toolchain.specs.arch import ModelArch

DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}


def bytes_per_param(weights: str, group_size: int = 128) -> float:
    """Storage bytes per quantized Linear parameter, scales included."""
    return {
        "bf16": 2.0,
        "fp16": 2.0,
        "fp8": 1.0,
        "int8_sq": 1.0,
        "int8_wo": 1.0,
        "int4_awq": 0.5 + 2.0 / group_size,
        "w4a8_awq": 0.5 + 2.0 / group_size,
        "nvfp4": 0.5 + 1.0 / 16,
    }[weights]


def nominal_bytes_per_param(weights: str) -> float:
    """Bytes per parameter without scales: the back-of-envelope figure (INT4 = 0.5 B)."""
    return {
        "bf16": 2.0,
        "fp16": 2.0,
        "fp8": 1.0,
        "int8_sq": 1.0,
        "int8_wo": 1.0,
        "int4_awq": 0.5,
        "w4a8_awq": 0.5,
        "nvfp4": 0.5,
    }[weights]


def weight_bytes(arch: ModelArch, weights: str, dtype: str = "bfloat16", group_size: int = 128) -> float:
    """Total weight bytes of the quantized model."""
    other = arch.embed_params + arch.lm_head_params + arch.norm_params
    return arch.linear_params * bytes_per_param(weights, group_size) + other * DTYPE_BYTES[dtype]


def decode_weight_bytes(
    arch: ModelArch, weights: str, dtype: str = "bfloat16", group_size: int = 128, batch: int = 1
) -> float:
    """Weight bytes one decode step of ``batch`` sequences reads (whole model, before TP/PP split)."""
    total = weight_bytes(arch, weights, dtype, group_size)
    if arch.num_experts:  # only the experts some token of the batch is routed to are read
        total -= (arch.expert_params - arch.expert_linear_read(batch)) * bytes_per_param(weights, group_size)
    if arch.tie_embeddings:
        return total
    row = arch.hidden_size * DTYPE_BYTES[dtype]
    return total - arch.embed_params * DTYPE_BYTES[dtype] + min(batch, arch.vocab_size) * row


def kv_dtype_bytes(kv_cache: str, dtype: str = "bfloat16") -> float:
    return {"fp8": 1.0, "int8": 1.0}.get(kv_cache, DTYPE_BYTES[dtype])


def kv_bytes_per_token(arch: ModelArch, kv_bytes: float, tp: int = 1, pp: int = 1) -> float:
    """KV bytes one token occupies on one rank: KV heads split over TP (replicated when TP > KV heads),
    layers split over PP."""
    kv_heads_per_rank = max(1, -(-arch.num_kv_heads // tp))
    layers_per_rank = -(-arch.num_layers // pp)
    return 2 * layers_per_rank * kv_heads_per_rank * arch.head_dim * kv_bytes


def kv_bytes_per_request(arch: ModelArch, kv_bytes: float, tokens: int, tp: int = 1, pp: int = 1) -> float:
    return kv_bytes_per_token(arch, kv_bytes, tp, pp) * tokens
