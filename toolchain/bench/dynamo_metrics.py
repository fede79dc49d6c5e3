"""NVIDIA Dynamo's Prometheus metrics as the server-side figures `toolchain bench` records and `diagnose` reads.

Names as Dynamo 1.6.1 serves them (dynamo/prometheus_names.py; measured here): the frontend's
``dynamo_frontend_requests_total{status}``, ``dynamo_frontend_time_to_first_token_seconds``,
``dynamo_frontend_inter_token_latency_seconds`` and ``dynamo_frontend_cached_tokens`` (histograms),
``dynamo_frontend_queued_requests`` and ``dynamo_frontend_model_kv_cache_block_size`` (gauges); each worker's
``dynamo_component_requests_total{dynamo_component="prefill"|"backend", dynamo_endpoint="generate"}``; and the
mocker's engine gauges, prefixed with its engine type (``trtllm:`` with ``--engine-type trtllm``, ``vllm:`` by
default): ``num_requests_waiting``, ``num_requests_running``, ``kv_cache_usage_perc`` (a fraction) and
``num_preemptions_total``.

Dynamo has no queue-time histogram, so the mean queue time is Little's law over the samples: mean requests
waiting (workers' engine queues + the frontend's) ÷ completed requests per second.
"""

from __future__ import annotations

from typing import Any

from toolchain.bench.samples import Snapshot

ENGINE_PREFIXES = ("trtllm:", "vllm:", "sglang:")


def is_dynamo(snap: Snapshot) -> bool:
    return any(s.name.startswith("dynamo_frontend_") for s in snap.samples)


def _engine(snap: Snapshot, metric: str) -> list[float]:
    return [s.value for s in snap.samples if s.name in {p + metric for p in ENGINE_PREFIXES}]


def server_side(
    before: Snapshot, after: Snapshot, during: list[Snapshot], model: str, period_s: float = 1.0
) -> dict[str, Any]:
    """Requests, prefill/decode split, queueing, KV usage and reuse, preemptions over one load point."""

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    out: dict[str, Any] = {"model": model, "source": "dynamo"}
    ok = delta("dynamo_frontend_requests_total", status="success")
    out["requests_success"] = ok
    out["requests_failure"] = delta("dynamo_frontend_requests_total") - ok
    out["prefill_worker_requests"] = delta(
        "dynamo_component_requests_total", dynamo_component="prefill", dynamo_endpoint="generate"
    )
    out["decode_worker_requests"] = delta(
        "dynamo_component_requests_total", dynamo_component="backend", dynamo_endpoint="generate"
    )
    for key, hist in (
        ("frontend_ttft_ms_mean", "dynamo_frontend_time_to_first_token_seconds"),
        ("frontend_itl_ms_mean", "dynamo_frontend_inter_token_latency_seconds"),
    ):
        n = delta(f"{hist}_count")
        if n > 0:
            out[key] = delta(f"{hist}_sum") / n * 1000.0
    cached = delta("dynamo_frontend_cached_tokens_sum")
    block = after.value("dynamo_frontend_model_kv_cache_block_size")
    if block:
        out["kv_reused_blocks"] = cached // block
    out["cached_tokens"] = cached
    usage = [v for s in during for v in _engine(s, "kv_cache_usage_perc")]
    if usage:
        out["kv_usage_max"] = max(usage)
        out["kv_usage_mean"] = sum(usage) / len(usage)
    if during:
        waiting = [sum(_engine(s, "num_requests_waiting")) + s.total("dynamo_frontend_queued_requests") for s in during]
        mean_waiting = sum(waiting) / len(waiting)
        out["queued_requests_mean"] = mean_waiting
        rate = ok / (len(during) * period_s)
        if rate > 0:
            out["queue_ms_mean"] = mean_waiting / rate * 1000.0
    pre_b, pre_a = sum(_engine(before, "num_preemptions_total")), sum(_engine(after, "num_preemptions_total"))
    out["preemptions"] = pre_a - pre_b
    return out
