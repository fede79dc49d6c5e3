"""The diagnosis rules of docs/diagnose.md. Each finding carries evidence, a severity and an action.

Thresholds (docs/diagnose.md): TTFT P99/P50 > 5 with queue time < 200 ms means prefill-decode
interference; queue P99 > 200 ms means too little capacity; KV usage > 80% means preemption risk;
GPU utilisation < 70% at peak means a scheduling/admission problem; a large TPOT P99/P50 means
prefill spikes stall decode; prefix caching configured but no reused blocks means it is not working.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # critical | warning | info
    evidence: str
    action: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Observations:
    """What the rules look at; every field optional (a rule without its inputs stays silent)."""

    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    queue_p99_ms: float | None = None
    queue_mean_ms: float | None = None
    kv_usage_max: float | None = None
    gpu_util_mean: float | None = None
    at_peak: bool = True
    prefix_caching_configured: bool | None = None
    reused_blocks: float | None = None
    # requests that shared a prompt prefix; 0 means the workload gave the cache nothing to reuse
    shared_prefix_requests: int | None = None


TTFT_RATIO, QUEUE_MS, KV_FRACTION, GPU_UTIL, TPOT_RATIO = 5.0, 200.0, 0.8, 0.7, 3.0


def diagnose(o: Observations) -> list[Finding]:
    """Every rule's finding on ``o``, in the order of docs/diagnose.md; empty when nothing is wrong."""
    queue = o.queue_p99_ms if o.queue_p99_ms is not None else o.queue_mean_ms
    qname = "queue P99" if o.queue_p99_ms is not None else "mean queue time"
    found = [
        _prefill_decode_interference(o, queue, qname),
        _undersized(queue, qname),
        _kv_preemption_risk(o),
        _gpu_underutilised(o),
        _prefill_spikes(o),
        _prefix_cache_unused(o),
    ]
    return [f for f in found if f is not None]


def _prefill_decode_interference(o: Observations, queue: float | None, qname: str) -> Finding | None:
    """A wide TTFT P99/P50 spread while requests barely queue: long prefills stall the batch."""
    if o.ttft_p50_ms and o.ttft_p99_ms is not None and queue is not None:
        ratio = o.ttft_p99_ms / o.ttft_p50_ms
        if ratio > TTFT_RATIO and queue < QUEUE_MS:
            return Finding(
                "prefill-decode-interference",
                "warning",
                f"TTFT P99/P50 = {ratio:.1f} (> {TTFT_RATIO:g}) while {qname} is {queue:.0f} ms "
                f"(< {QUEUE_MS:g} ms): long prefills stall the batch, not a capacity shortage",
                "enable chunked prefill (serving.enable_chunked_prefill); at scale consider "
                "disaggregated prefill/decode",
            )
    return None


def _undersized(queue: float | None, qname: str) -> Finding | None:
    """Requests queue too long: too little capacity for the load."""
    if queue is not None and queue > QUEUE_MS:
        return Finding(
            "undersized",
            "critical",
            f"{qname} is {queue:.0f} ms (> {QUEUE_MS:g} ms)",
            "add GPUs/instances (see `toolchain plan` fleet size) or lower admitted load",
        )
    return None


def _kv_preemption_risk(o: Observations) -> Finding | None:
    """The KV cache ran nearly full: requests risk preemption."""
    if o.kv_usage_max is not None and o.kv_usage_max > KV_FRACTION:
        return Finding(
            "kv-preemption-risk",
            "critical" if o.kv_usage_max > 0.95 else "warning",
            f"KV-cache usage peaked at {o.kv_usage_max:.0%} (> {KV_FRACTION:.0%})",
            "reduce max_seq_len or max batch, raise kv_cache_free_gpu_mem_fraction, or add GPUs",
        )
    return None


def _gpu_underutilised(o: Observations) -> Finding | None:
    """The GPU idled at peak load: a scheduling or admission problem."""
    if o.gpu_util_mean is not None and o.at_peak and o.gpu_util_mean < GPU_UTIL:
        return Finding(
            "gpu-underutilised",
            "warning",
            f"GPU utilisation averaged {o.gpu_util_mean:.0%} at peak (< {GPU_UTIL:.0%})",
            "check scheduling and admission: scheduler policy, max_queue_delay, instance count, client concurrency",
        )
    return None


def _prefill_spikes(o: Observations) -> Finding | None:
    """A wide TPOT P99/P50 spread: prefill steps stall decode."""
    if o.tpot_p50_ms and o.tpot_p99_ms is not None:
        ratio = o.tpot_p99_ms / o.tpot_p50_ms
        if ratio > TPOT_RATIO:
            return Finding(
                "prefill-spikes",
                "warning",
                f"TPOT P99/P50 = {ratio:.1f} (> {TPOT_RATIO:g})",
                "enable chunked prefill and cap max_num_tokens so decode steps are not stalled",
            )
    return None


def _prefix_cache_unused(o: Observations) -> Finding | None:
    """Prefix caching is configured and prompts shared prefixes, yet no KV block was reused."""
    if (
        o.prefix_caching_configured
        and o.reused_blocks is not None
        and o.reused_blocks == 0
        and o.shared_prefix_requests != 0
    ):
        return Finding(
            "prefix-cache-unused",
            "warning",
            "prefix caching is configured but the server reused 0 KV blocks",
            "check the engine has paged context FMHA, prompts share >= tokens_per_block leading "
            "tokens, and enable_kv_cache_reuse is true",
        )
    return None


def bench_window(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server metrics a bench result recorded during its busiest load point, if it has them."""
    runs = [r for r in (result or {}).get("runs", []) if r.get("summary", {}).get("completed")]
    if not runs:
        return None
    peak = max(runs, key=lambda r: r["summary"]["output_token_throughput_tps"])
    server = peak.get("server")
    return server if server and "error" not in server else None


def observations_from(
    result: dict[str, Any] | None, server: dict[str, Any] | None, prefix_configured: bool | None
) -> Observations:
    o = Observations(prefix_caching_configured=prefix_configured)
    if result:
        runs = [r for r in result.get("runs", []) if r.get("summary", {}).get("completed")]
        if runs:
            peak = max(runs, key=lambda r: r["summary"]["output_token_throughput_tps"])
            s = peak["summary"]
            o.ttft_p50_ms = (s.get("ttft_ms") or {}).get("p50")
            o.ttft_p99_ms = (s.get("ttft_ms") or {}).get("p99")
            o.tpot_p50_ms = (s.get("tpot_ms") or {}).get("p50")
            o.tpot_p99_ms = (s.get("tpot_ms") or {}).get("p99")
            window = peak.get("server")
            if window and "error" not in window:
                server = window  # sampled during the bench, not now on a possibly idle server
            o.shared_prefix_requests = sum((r.get("prefix") or {}).get("shared_requests", 0) for r in runs)
    if server:
        o.queue_p99_ms = server.get("queue_ms_p99")
        o.queue_mean_ms = server.get("queue_ms_mean")
        o.kv_usage_max = server.get("kv_usage_max")
        o.gpu_util_mean = server.get("gpu_util_mean")
        o.reused_blocks = server.get("kv_reused_blocks")
    return o
