"""The diagnosis rules of docs/diagnose.md evaluated on a bench result and/or a sample of server metrics.

The rules themselves (threshold, severity, action, order) are the rows of ``toolchain.artifacts.rule_table``, the
same table the deployment's Prometheus alerts are built from; this module evaluates each row on
``Observations`` and writes the evidence with the numbers that triggered it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from toolchain.artifacts.bench_result import BenchResult, LoadPoint, ServerWindow
from toolchain.artifacts.rule_table import (
    BY_NAME,
    ERROR_RATIO,
    GPU_UTIL,
    KV_CRITICAL,
    KV_FRACTION,
    QUEUE_MS,
    RULES,
    TPOT_RATIO,
    TTFT_RATIO,
)

__all__ = ["GPU_UTIL", "KV_FRACTION", "QUEUE_MS", "TPOT_RATIO", "TTFT_RATIO", "Finding", "Observations", "diagnose"]


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
    requests_success: float | None = None
    requests_failure: float | None = None


def _finding(rule: str, evidence: str, severity: str | None = None) -> Finding:
    row = BY_NAME[rule]
    return Finding(rule, severity or row.severity, evidence, row.action)


def diagnose(o: Observations) -> list[Finding]:
    """Every rule's finding on ``o``, in the table's (the cookbook's) order; empty when nothing is wrong."""
    found = [EVALUATORS[r.name](o) for r in RULES]
    return [f for f in found if f is not None]


def _queue(o: Observations) -> tuple[float | None, str]:
    """The queue time the rules read: the P99 where the server exports it, else the mean."""
    if o.queue_p99_ms is not None:
        return o.queue_p99_ms, "queue P99"
    return o.queue_mean_ms, "mean queue time"


def _prefill_decode_interference(o: Observations) -> Finding | None:
    """A wide TTFT P99/P50 spread while requests barely queue: long prefills stall the batch."""
    queue, qname = _queue(o)
    if o.ttft_p50_ms and o.ttft_p99_ms is not None and queue is not None:
        ratio = o.ttft_p99_ms / o.ttft_p50_ms
        if ratio > TTFT_RATIO and queue < QUEUE_MS:
            return _finding(
                "prefill-decode-interference",
                f"TTFT P99/P50 = {ratio:.1f} (> {TTFT_RATIO:g}) while {qname} is {queue:.0f} ms "
                f"(< {QUEUE_MS:g} ms): long prefills stall the batch, not a capacity shortage",
            )
    return None


def _undersized(o: Observations) -> Finding | None:
    """Requests queue too long: too little capacity for the load."""
    queue, qname = _queue(o)
    if queue is not None and queue > QUEUE_MS:
        return _finding("undersized", f"{qname} is {queue:.0f} ms (> {QUEUE_MS:g} ms)")
    return None


def _kv_preemption_risk(o: Observations) -> Finding | None:
    """The KV cache ran nearly full: requests risk preemption."""
    if o.kv_usage_max is not None and o.kv_usage_max > KV_FRACTION:
        return _finding(
            "kv-preemption-risk",
            f"KV-cache usage peaked at {o.kv_usage_max:.0%} (> {KV_FRACTION:.0%})",
            "critical" if o.kv_usage_max > KV_CRITICAL else None,
        )
    return None


def _gpu_underutilised(o: Observations) -> Finding | None:
    """The GPU idled at peak load: a scheduling or admission problem."""
    if o.gpu_util_mean is not None and o.at_peak and o.gpu_util_mean < GPU_UTIL:
        return _finding(
            "gpu-underutilised", f"GPU utilisation averaged {o.gpu_util_mean:.0%} at peak (< {GPU_UTIL:.0%})"
        )
    return None


def _prefill_spikes(o: Observations) -> Finding | None:
    """A wide TPOT P99/P50 spread: prefill steps stall decode."""
    if o.tpot_p50_ms and o.tpot_p99_ms is not None:
        ratio = o.tpot_p99_ms / o.tpot_p50_ms
        if ratio > TPOT_RATIO:
            return _finding("prefill-spikes", f"TPOT P99/P50 = {ratio:.1f} (> {TPOT_RATIO:g})")
    return None


def _prefix_cache_unused(o: Observations) -> Finding | None:
    """Prefix caching is configured and prompts shared prefixes, yet no KV block was reused."""
    if (
        o.prefix_caching_configured
        and o.reused_blocks is not None
        and o.reused_blocks == 0
        and o.shared_prefix_requests != 0
    ):
        return _finding("prefix-cache-unused", "prefix caching is configured but the server reused 0 KV blocks")
    return None


def _request_errors(o: Observations) -> Finding | None:
    """Too many requests failed during the window."""
    ok, bad = o.requests_success, o.requests_failure
    if ok is not None and bad is not None and ok + bad > 0 and bad / (ok + bad) > ERROR_RATIO:
        return _finding(
            "request-errors",
            f"{bad:.0f} of {ok + bad:.0f} requests failed ({bad / (ok + bad):.1%}, > {ERROR_RATIO:.0%})",
        )
    return None


EVALUATORS: dict[str, Callable[[Observations], Finding | None]] = {
    "undersized": _undersized,
    "kv-preemption-risk": _kv_preemption_risk,
    "prefill-decode-interference": _prefill_decode_interference,
    "prefill-spikes": _prefill_spikes,
    "gpu-underutilised": _gpu_underutilised,
    "request-errors": _request_errors,
    "prefix-cache-unused": _prefix_cache_unused,
}


def _peak(result: BenchResult | None) -> tuple[LoadPoint | None, list[LoadPoint]]:
    """The busiest load point with a completed request, and every such point."""
    runs = [r for r in (result.runs if result is not None else []) if r.summary.completed]
    if not runs:
        return None, []
    return max(runs, key=lambda r: r.summary.output_token_throughput_tps), runs


def _window(run: LoadPoint | None) -> ServerWindow | None:
    """A load point's server metrics, unless there are none or the closing scrape failed."""
    server = run.server if run is not None else None
    return server if server is not None and server.error is None else None


def bench_window(result: BenchResult | None) -> dict[str, Any] | None:
    """The server metrics a bench result recorded during its busiest load point, if it has them, as the result
    holds them (the fields a live sample has: ``toolchain.bench.prom.server_side``)."""
    window = _window(_peak(result)[0])
    return window.model_dump(mode="json", exclude_unset=True) if window is not None else None


def observations_from(
    result: BenchResult | None, server: dict[str, Any] | None, prefix_configured: bool | None
) -> Observations:
    """What the rules look at: the busiest load point's latencies and its server window (else ``server``, a live
    sample's figures)."""
    o = Observations(prefix_caching_configured=prefix_configured)
    peak, runs = _peak(result)
    if peak is not None:
        s = peak.summary
        o.ttft_p50_ms = s.ttft_ms.p50 if s.ttft_ms else None
        o.ttft_p99_ms = s.ttft_ms.p99 if s.ttft_ms else None
        o.tpot_p50_ms = s.tpot_ms.p50 if s.tpot_ms else None
        o.tpot_p99_ms = s.tpot_ms.p99 if s.tpot_ms else None
        o.shared_prefix_requests = sum(r.prefix.shared_requests for r in runs if r.prefix is not None)
        window = _window(peak)  # sampled during the bench, not now on a possibly idle server
        if window is not None:
            _from_window(o, window)
            return o
    if server:  # a figure with no observation reads NaN: not measured, as a result leaves it out
        measured = {k: v for k, v in server.items() if not (isinstance(v, float) and not math.isfinite(v))}
        _from_window(o, ServerWindow.model_validate(measured, strict=False))
    return o


def _from_window(o: Observations, w: ServerWindow) -> None:
    o.queue_p99_ms = w.queue_ms_p99
    o.queue_mean_ms = w.queue_ms_mean
    o.kv_usage_max = w.kv_usage_max
    o.gpu_util_mean = w.gpu_util_mean
    o.reused_blocks = w.kv_reused_blocks
    o.requests_success = w.requests_success
    o.requests_failure = w.requests_failure
