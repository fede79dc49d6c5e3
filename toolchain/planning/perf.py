"""Performance floors and fleet sizing.

- TPOT floor: every decode step reads the weights of a rank (the input-embedding table only for
  the looked-up rows, unless it is tied to lm_head) plus the KV cache of every request
  in the batch; at HBM bandwidth B, TPOT_min = (weight bytes + KV bytes read) / B.
- Prefill time ≈ 2 × active params × prompt tokens / (peak FLOP/s × MFU).
- Fleet sizing (five steps): peak tok/s = peak rps × avg output tokens; tok/s per instance at the
  TPOT SLA = (1000 / TPOT_ms) × batch at SLA; raw instances = peak / per-instance; total =
  raw / utilization × burst headroom (rounded up); check the SLA batch fits the KV budget.
- Speculative decoding: E[tokens per verify] = (1 − α^(K+1)) / (1 − α).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def tpot_floor_ms(weight_bytes: float, kv_bytes_read: float, hbm_bytes_s: float) -> float:
    return (weight_bytes + kv_bytes_read) / hbm_bytes_s * 1000.0


def prefill_ms(active_params: float, prompt_tokens: int, peak_flops: float, mfu: float) -> float:
    return 2.0 * active_params * prompt_tokens / (peak_flops * mfu) * 1000.0


def speculative_tokens(alpha: float, k: int) -> float:
    if not 0 < alpha < 1:
        raise ValueError("acceptance rate must be in (0, 1)")
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def ceil_clean(x: float) -> int:
    """Ceiling that ignores float noise (78.125 / 0.75 * 1.2 is 125.00000000000001)."""
    return math.ceil(round(x, 9))


@dataclass(frozen=True)
class Fleet:
    peak_tok_s: float
    tok_s_per_instance: float
    raw_instances: float
    total_instances: int
    gpus_per_instance: int
    batch_at_sla: int
    kv_max_concurrency: int
    kv_ok: bool

    @property
    def raw_gpus(self) -> float:
        return self.raw_instances * self.gpus_per_instance

    @property
    def total_gpus(self) -> int:
        return self.total_instances * self.gpus_per_instance


def fleet_size(
    *,
    peak_rps: float,
    avg_output_tokens: float,
    tpot_target_ms: float,
    batch_at_sla: int,
    gpus_per_instance: int = 1,
    utilization: float = 0.75,
    headroom: float = 1.2,
    kv_max_concurrency: int | None = None,
    tokens_per_step: float = 1.0,
) -> Fleet:
    if peak_rps <= 0 or avg_output_tokens <= 0:
        raise ValueError("traffic must be positive")
    if batch_at_sla < 1:
        raise ValueError("batch at SLA must be at least 1")
    peak = peak_rps * avg_output_tokens
    per = (1000.0 / tpot_target_ms) * batch_at_sla * tokens_per_step
    raw = peak / per
    total = ceil_clean(raw * gpus_per_instance / utilization * headroom)
    instances = -(-total // gpus_per_instance)
    kvmax = kv_max_concurrency if kv_max_concurrency is not None else batch_at_sla
    return Fleet(peak, per, raw, instances, gpus_per_instance, batch_at_sla, kvmax, batch_at_sla <= kvmax)


def gpus(n: int) -> str:
    """``n`` GPUs in words: "1 GPU", "24 GPUs"."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def fleet_arithmetic(f: dict[str, Any]) -> str:
    """A fleet's sizing as arithmetic a reader can redo from the printed numbers: the raw instances, the whole
    instances at full load, and the utilization target, burst headroom and rounding up to whole instances."""
    g, raw = int(f["gpus_per_instance"]), float(f["raw_instances"])
    full = max(1, ceil_clean(raw))
    text = (
        f"peak {f['peak_tok_s']:,.0f} tok/s ÷ {f['tok_s_per_instance']:,.1f} tok/s per instance = {raw:.3f} "
        f"instances; at full load ceil({raw:.3f}) = {full} × {gpus(g)} = {gpus(full * g)}"
    )
    if "utilization" not in f or "headroom" not in f:  # a fleet recorded before these were kept
        return text + f"; ÷ utilization × headroom = {gpus(int(f['total_gpus']))} ({f['total_instances']} instances)"
    u, h = float(f["utilization"]), float(f["headroom"])
    exact = raw * g / u * h
    return text + (
        f"; {raw:.3f} × {g} ÷ utilization {u:g} × headroom {h:g} = {exact:.2f} GPUs → {ceil_clean(exact)}, "
        f"in whole instances of {g}: {f['total_instances']} × {g} = {gpus(int(f['total_gpus']))}"
    )
