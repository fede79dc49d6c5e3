"""Speculative-decoding speed-up and break-even acceptance rate; LoRA adapter memory.

Speculative decoding (docs/speculative-and-lora.md §6). With per-token acceptance α and K drafted tokens a
verify step yields ``E = (1 − α^(K+1)) / (1 − α)`` tokens (α = 1: K + 1). One speculative step costs the
draft's K tokens ``t_draft`` plus one target verify ``t_verify``; plain decoding costs ``t_base`` per
token. Speed-up ``S = E · t_base / (t_verify + t_draft)``; the break-even α* solves
``E(α*, K) = (t_verify + t_draft) / t_base``. E rises strictly from 1 (α = 0) to K + 1 (α → 1), so α*
exists and is unique when the cost ratio lies in (1, K + 1): bisection finds it.

LoRA (§1, §4). An adapter of rank r on a module with input width ``d_in`` and output width ``d_out`` holds
``r × (d_in + d_out)`` weights per layer (A is r × d_in, B is d_out × r). Under tensor parallelism a
column-parallel module (q/k/v, gate/up) splits ``d_out`` and a row-parallel one (o_proj, down) splits
``d_in``; the rank is never split. The Triton GPU adapter cache is ``lora_cache_gpu_memory_fraction`` of
the memory left after the engine and the KV cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from toolchain.specs.arch import ModelArch

if TYPE_CHECKING:
    from toolchain.specs.matrix import Cell


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per verify step for acceptance α in [0, 1] and K draft tokens."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance rate {alpha} is not in [0, 1]")
    if k < 0:
        raise ValueError(f"draft length {k} is negative")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speedup(alpha: float, k: int, t_verify_ms: float, t_draft_ms: float, t_base_ms: float | None = None) -> float:
    """Decode throughput of speculative decoding relative to plain decoding."""
    base = t_verify_ms if t_base_ms is None else t_base_ms
    return expected_tokens(alpha, k) * base / (t_verify_ms + t_draft_ms)


def break_even_alpha(k: int, t_verify_ms: float, t_draft_ms: float, t_base_ms: float | None = None) -> float | None:
    """The acceptance rate below which speculative decoding is slower than plain decoding.

    0.0 when it always helps (drafting is free and verify costs no more than a plain step); None when no
    α helps (the step costs K + 1 plain steps or more)."""
    if min(t_verify_ms, t_draft_ms) < 0 or k < 1:
        raise ValueError("costs must be non-negative and K at least 1")
    base = t_verify_ms if t_base_ms is None else t_base_ms
    if base <= 0:
        raise ValueError("the plain decode step must take time")
    ratio = (t_verify_ms + t_draft_ms) / base
    if ratio <= 1.0:
        return 0.0
    if ratio >= k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < ratio:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return (lo + hi) / 2


# module -> (input width, output width, split by TP on "out" or "in") for a Llama-style decoder
def _module_dims(arch: ModelArch) -> dict[str, tuple[int, int, str]]:
    h, q, kv, inter = (
        arch.hidden_size,
        arch.num_heads * arch.head_dim,
        arch.num_kv_heads * arch.head_dim,
        arch.intermediate_size,
    )
    return {
        "attn_qkv": (h, q + 2 * kv, "out"),
        "attn_q": (h, q, "out"),
        "attn_k": (h, kv, "out"),
        "attn_v": (h, kv, "out"),
        "attn_dense": (q, h, "in"),
        "mlp_h_to_4h": (h, inter, "out"),
        "mlp_gate": (h, inter, "out"),
        "mlp_gate_up": (h, 2 * inter, "out"),
        "mlp_4h_to_h": (inter, h, "in"),
    }


def adapter_bytes(arch: ModelArch, rank: int, modules: Sequence[str], tp: int = 1, dtype_bytes: int = 2) -> int:
    """Bytes of one rank-``rank`` adapter on ``modules`` held by one TP rank (FP16 weights by default)."""
    dims = _module_dims(arch)
    unknown = [m for m in modules if m not in dims]
    if unknown:
        raise ValueError(f"no dense-decoder dimensions for LoRA module(s) {', '.join(unknown)}")
    per_layer = 0.0
    for m in modules:
        d_in, d_out, split = dims[m]
        per_layer += rank * ((d_in + d_out / tp) if split == "out" else (d_in / tp + d_out))
    return math.ceil(per_layer * arch.num_layers * dtype_bytes)


@dataclass(frozen=True)
class LoraMemory:
    adapter_bytes_per_gpu: int  # one adapter at max_rank, one TP rank
    gpu_cache_bytes: float
    host_cache_bytes: int
    adapters_in_gpu_cache: int
    adapters_in_host_cache: int


def lora_memory(
    arch: ModelArch,
    rank: int,
    modules: Sequence[str],
    tp: int,
    left_after_kv_bytes: float,
    gpu_fraction: float,
    host_bytes: int,
) -> LoraMemory:
    one = adapter_bytes(arch, rank, modules, tp)
    whole = adapter_bytes(arch, rank, modules, 1)
    gpu = max(0.0, left_after_kv_bytes) * gpu_fraction
    return LoraMemory(one, gpu, host_bytes, int(gpu // one) if one else 0, host_bytes // whole if whole else 0)


def feature_plan(
    cell: Cell,
    *,
    tpot_b1_ms: float,
    avg_context: int,
    left_after_kv_bytes: float,
    arch: ModelArch,
) -> dict[str, Any]:
    """The speculative and LoRA lines of one cell's plan (empty when the spec uses neither)."""
    spec = cell.spec
    out: dict[str, Any] = {}
    sd = spec.speculative
    if sd is not None:
        t = spec.traffic.speculative if spec.traffic else None
        k = t.draft_len if t else sd.draft_len
        s: dict[str, Any] = {"mode": sd.mode, "draft_len": k, "engine_max_draft_len": sd.draft_len}
        if t:
            s["acceptance_rate"] = t.acceptance_rate
            s["expected_tokens"] = expected_tokens(t.acceptance_rate, k)
        if sd.mode == "draft_target":
            d_tpot = _draft_tpot_ms(cell, avg_context)
            if d_tpot is None:
                s["note"] = "draft model architecture unknown offline; no break-even"
            else:
                s["draft_tpot_ms"] = d_tpot
                s["t_draft_ms"] = k * d_tpot
                s["t_verify_ms"] = tpot_b1_ms
                s["break_even_alpha"] = break_even_alpha(k, tpot_b1_ms, k * d_tpot)
                if t:
                    s["speedup"] = speedup(t.acceptance_rate, k, tpot_b1_ms, k * d_tpot)
        out["speculative"] = s
    lo = spec.lora
    if lo is not None:
        mods = [m for m in lo.target_modules if m in _module_dims(arch)]
        mem = lora_memory(
            arch,
            lo.max_rank,
            mods,
            cell.tp,
            left_after_kv_bytes,
            lo.cache.gpu_memory_fraction,
            lo.cache.host_memory_bytes,
        )
        out["lora"] = {"max_rank": lo.max_rank, "modules": mods, **asdict(mem)}
    return out


def _draft_tpot_ms(cell: Cell, avg_context: int) -> float | None:
    """Batch-1 decode floor of the draft model on this cell's GPU (weights + KV read per token)."""
    from toolchain.errors import ModelConfigError
    from toolchain.planning import bytes as B
    from toolchain.planning.perf import tpot_floor_ms
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.speculative_spec import draft_spec

    ds = draft_spec(cell.spec)
    try:
        darch = arch_for_spec(ds, allow_network=False)
    except ModelConfigError:
        return None
    q = ds.quantization
    weights = B.decode_weight_bytes(darch, q.weights, ds.model.dtype, q.awq_group_size, 1) / cell.tp
    kv = B.kv_bytes_per_token(darch, B.kv_dtype_bytes(q.kv_cache, ds.model.dtype), cell.tp, cell.pp) * avg_context
    return tpot_floor_ms(weights, kv * cell.pp, cell.gpu.hbm_bytes_s)


def feature_explain(features: dict[str, Any]) -> list[str]:
    lines = []
    s = features.get("speculative")
    if s:
        head = f"  speculative {s['mode']}: K = {s['draft_len']} (engine max_draft_len {s['engine_max_draft_len']})"
        if "expected_tokens" in s:
            head += f", α = {s['acceptance_rate']:g} → E[tokens/verify] = {s['expected_tokens']:.2f}"
        lines.append(head)
        if "break_even_alpha" in s:
            a = s["break_even_alpha"]
            where = "never helps" if a is None else f"α* = {a:.4f}"
            lines.append(
                f"    step = verify {s['t_verify_ms']:.2f} ms + draft K × {s['draft_tpot_ms']:.2f} ms = "
                f"{s['t_verify_ms'] + s['t_draft_ms']:.2f} ms; break-even E(α*) = step ÷ plain step: {where}"
                + (f"; speed-up at α {s['acceptance_rate']:g} = {s['speedup']:.2f}×" if "speedup" in s else "")
            )
        elif "note" in s:
            lines.append(f"    {s['note']}")
    lo = features.get("lora")
    if lo:
        lines.append(
            f"  LoRA rank {lo['max_rank']} on {', '.join(lo['modules'])}: {lo['adapter_bytes_per_gpu'] / 1e6:.2f} MB "
            f"per adapter per GPU; GPU cache {lo['gpu_cache_bytes'] / 1e9:.2f} GB holds {lo['adapters_in_gpu_cache']}, "
            f"host cache {lo['host_cache_bytes'] / 1e9:.2f} GB holds {lo['adapters_in_host_cache']}"
        )
    return lines
