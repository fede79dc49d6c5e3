"""The server-side figures a diagnosis read (``toolchain.bench.prom.server_side``, or the Dynamo frontend's), as
lines a person reads: each figure with its unit and rounded to what it can tell (`toolchain diagnose`, reports).
``--json`` keeps the raw fields; this is only their human form."""

from __future__ import annotations

from typing import Any

from toolchain.units import fmt_ms


def _count(x: Any) -> str:
    return f"{x:,.0f}" if isinstance(x, int | float) and float(x).is_integer() else _number(x)


def _number(x: Any) -> str:
    """A figure without a unit: three significant digits, never a float's full repr."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.3g}"


def percent(fraction: float) -> str:
    """A fraction (0..1) as a percentage with the digits it needs: 45%, 2.5%, 0.0041%."""
    p = fraction * 100
    if p == 0:
        return "0%"
    if abs(p) >= 10:
        return f"{p:.0f}%"
    if abs(p) >= 1:
        return f"{p:.1f}%"
    return f"{p:.2g}%"


def _pair(server: dict[str, Any], mean: str, peak: str, fmt: Any, peak_word: str) -> str | None:
    parts = []
    if isinstance(server.get(mean), int | float):
        parts.append(f"mean {fmt(server[mean])}")
    if isinstance(server.get(peak), int | float):
        parts.append(f"{peak_word} {fmt(server[peak])}")
    return ", ".join(parts) or None


# Keys a line below already says; anything else is listed as it is, rounded.
_SAID = {
    "model",
    "requests_success",
    "requests_failure",
    "queue_ms_mean",
    "queue_ms_p99",
    "compute_infer_ms_mean",
    "kv_usage_mean",
    "kv_usage_max",
    "kv_reused_blocks",
    "cached_tokens",
    "gpu_util_mean",
    "gpu_util_max",
    "queued_requests_mean",
    "preemptions",
    "prefill_worker_requests",
    "decode_worker_requests",
}


def server_lines(server: dict[str, Any]) -> list[str]:
    """The server's figures over the window a diagnosis read, one topic a line: requests, queue and compute time
    (ms), KV-cache use (percent) and reuse, GPU utilisation (percent), then any other field, rounded."""
    s = {k: v for k, v in server.items() if v is not None}
    head = f"server ({s['model']})" if s.get("model") else "server"
    counts = []
    if "requests_success" in s:
        counts.append(f"{_count(s['requests_success'])} requests succeeded")
    if "requests_failure" in s:
        counts.append(f"{_count(s['requests_failure'])} failed")
    if "prefill_worker_requests" in s or "decode_worker_requests" in s:
        counts.append(
            f"prefill workers {_count(s.get('prefill_worker_requests', 0))}, "
            f"decode workers {_count(s.get('decode_worker_requests', 0))}"
        )
    lines = [head + (": " + ", ".join(counts) if counts else "")]
    time_parts = []
    queue = _pair(s, "queue_ms_mean", "queue_ms_p99", fmt_ms, "p99")
    if queue:
        time_parts.append(f"queue {queue}")
    if "queued_requests_mean" in s:
        time_parts.append(f"{_number(s['queued_requests_mean'])} requests waiting on average")
    if isinstance(s.get("compute_infer_ms_mean"), int | float):
        time_parts.append(f"compute mean {fmt_ms(s['compute_infer_ms_mean'])} per request")
    if time_parts:
        lines.append("  " + "; ".join(time_parts))
    kv = _pair(s, "kv_usage_mean", "kv_usage_max", percent, "max")
    kv_parts = [f"KV cache used {kv}"] if kv else []
    if "kv_reused_blocks" in s:
        kv_parts.append(f"{_count(s['kv_reused_blocks'])} blocks reused")
    if "cached_tokens" in s:
        kv_parts.append(f"{_count(s['cached_tokens'])} prompt tokens from the cache")
    if "preemptions" in s:
        kv_parts.append(f"{_count(s['preemptions'])} preemptions")
    if kv_parts:
        lines.append("  " + "; ".join(kv_parts))
    gpu = _pair(s, "gpu_util_mean", "gpu_util_max", percent, "max")
    if gpu:
        lines.append(f"  GPU utilisation {gpu}")
    rest = [f"{k} {_number(v)}" for k, v in s.items() if k not in _SAID]
    if rest:
        lines.append("  " + "; ".join(rest))
    return lines


def slo_line(slo: dict[str, float]) -> str | None:
    """The per-request SLOs a benchmark measured against, named and in ms ("SLOs: TTFT 2000 ms, TPOT 500 ms per
    request"), or None without any."""
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
    parts = [f"{names.get(k, k)} {v:g} ms" for k, v in slo.items()]  # as the spec writes them
    return f"SLOs the benchmark measured against: {', '.join(parts)} per request" if parts else None
