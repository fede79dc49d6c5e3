"""Prometheus text scraping and the server-side numbers a benchmark reports."""

from __future__ import annotations

import urllib.parse
from typing import Any

from toolchain import http
from toolchain.bench import dynamo_metrics
from toolchain.bench.samples import Sample, Snapshot, parse
from toolchain.errors import BenchError, BenchUnavailableError

__all__ = ["Sample", "Snapshot", "parse", "scrape", "server_side"]

MAX_BODY = 64 * 2**20  # a Triton /metrics page is tens of KB
# a scrape is sampled again a second later during a run: one quick second try, not the registry's patience
SCRAPE_POLICY = http.Backoff(attempts=2, base=0.25, cap=1.0, max_wait=2.0)
BENCH_ERRORS = http.Kinds(auth=BenchError, missing=BenchError, unavailable=BenchUnavailableError, other=BenchError)


def scrape(url: str, timeout: float = 5.0) -> Snapshot:
    """One sample of a Prometheus text endpoint (http or https only); a body with no sample is refused.

    Several endpoints, comma-separated (a Dynamo frontend and its workers), are scraped into one snapshot."""
    if "," in url:
        merged = Snapshot()
        for one in (u.strip() for u in url.split(",") if u.strip()):
            merged.samples += scrape(one, timeout).samples
        return merged
    hint = "check --metrics-url (Triton serves /metrics on 8002)"
    shown = url if len(url) <= 120 else url[:117] + "..."
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number in range
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok or any(ord(c) < 33 for c in url):
        raise BenchError(f"{shown!r} is not an http(s) URL of a metrics endpoint", hint)
    service = http.Service(
        f"the metrics endpoint at {shown}",
        kinds=BENCH_ERRORS,
        hints={0: hint, 401: hint, 403: hint, 404: hint, 429: hint, 500: hint},
        policy=SCRAPE_POLICY,
    )
    body = http.get(url, "a metrics scrape", service, timeout=timeout, limit=MAX_BODY)
    if len(body) > MAX_BODY:
        raise BenchError(f"{shown} returned more than {MAX_BODY // 2**20} MiB; that is not a metrics page", hint)
    snap = parse(body.decode("utf-8", "replace"))
    if not snap.samples:
        raise BenchError(f"{shown} did not return Prometheus metrics (no sample in its body)", hint)
    return snap


def server_side(
    before: Snapshot, after: Snapshot, during: list[Snapshot], model: str, served: str | None = None
) -> dict[str, Any]:
    """Queue and compute time per request, KV usage, reused blocks, GPU utilisation over a run. ``model`` is the
    Triton model whose metrics count (``tensorrt_llm``); ``served`` the name clients ask for, which is what a
    Dynamo frontend's block names (its metrics carry no Triton model)."""

    if dynamo_metrics.is_dynamo(after):  # a Dynamo frontend (and its workers): its own metric names
        return dynamo_metrics.server_side(before, after, during, served or model)

    def delta(name: str, **lb: str) -> float:
        return after.total(name, **lb) - before.total(name, **lb)

    out: dict[str, Any] = {"model": model}
    n = delta("nv_inference_request_success", model=model)
    out["requests_success"] = n
    out["requests_failure"] = delta("nv_inference_request_failure", model=model)
    if n > 0:
        out["queue_ms_mean"] = delta("nv_inference_queue_duration_us", model=model) / n / 1000
        out["compute_infer_ms_mean"] = delta("nv_inference_compute_infer_duration_us", model=model) / n / 1000
    q99 = after.value("nv_inference_queue_summary_us", model=model, quantile="0.99")
    if q99 is not None:
        out["queue_ms_p99"] = q99 / 1000
    fractions = [
        v
        for s in during
        for v in [s.value("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction")]
        if v is not None
    ]
    if fractions:
        out["kv_usage_max"] = max(fractions)
        out["kv_usage_mean"] = sum(fractions) / len(fractions)
    rb, ra = (
        before.value("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="reused"),
        after.value("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="reused"),
    )
    if ra is not None:
        out["kv_reused_blocks"] = ra - (rb or 0)
    gpu = [
        s.total("nv_gpu_utilization") / max(1, len(s.get("nv_gpu_utilization")))
        for s in during
        if s.get("nv_gpu_utilization")
    ]
    if gpu:
        out["gpu_util_max"] = max(gpu)
        out["gpu_util_mean"] = sum(gpu) / len(gpu)
    return out
