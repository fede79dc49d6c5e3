"""Metric definitions, once, for code and report alike.

- TTFT: request sent -> first streamed token chunk received (client clock).
- E2E: request sent -> last chunk received.
- TPOT (per request): (E2E - TTFT) / (output tokens - 1); undefined for one-token outputs.
- ICL (inter chunk latency): every gap between consecutive streamed chunks, pooled over requests.
  TPOT is what AIPerf calls "inter token latency" (ITL); the chunk gaps are its "inter chunk latency"
  (ICL). Names and formulas: docs/metrics.md.
- Request throughput: completed requests / measured wall time; output-token throughput likewise.
- Goodput: requests per second that met every SLO in the spec (TTFT and TPOT targets).
Output tokens come from the server (`num_output_tokens`, `sequence_length`, OpenAI `usage`) when it
reports them; otherwise the chunk count is used and the result says so (``token_source``).
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import ConfigDict

from toolchain.artifacts.bench_result import Measured, Record

PCTS = (50, 90, 95, 99)
DEFINITIONS = {
    "ttft_ms": "request sent -> first streamed token (client clock)",
    "tpot_ms": "(E2E - TTFT) / (output tokens - 1), per request; AIPerf's inter token latency",
    "icl_ms": "every gap between consecutive streamed chunks; AIPerf's inter chunk latency",
    "e2e_ms": "request sent -> last chunk (a failed or abandoned request: -> when it ended)",
    "goodput_rps": "completed requests per second that met every SLO",
}
# Our summary key -> the metric tag AIPerf uses for the same quantity (docs/metrics.md).
AIPERF_NAMES = {
    "ttft_ms": "time_to_first_token",
    "tpot_ms": "inter_token_latency",
    "icl_ms": "inter_chunk_latency",
    "e2e_ms": "request_latency",
    "output_tokens": "output_sequence_length",
    "request_throughput_rps": "request_throughput",
    "output_token_throughput_tps": "output_token_throughput",
}


class RequestRecord(Measured):
    """One request while it runs: the only mutable form of its measurement (its fields are ``Measured``'s, declared
    once in toolchain.artifacts.bench_result), filled on the hot path; ``record()`` is what is saved of it.

    Error kinds (``error_kind``): server (it answered with an error), connection (it went away), protocol (an answer
    we cannot use), timeout, cancelled (in flight when the run was interrupted: neither ok nor an error)."""

    model_config = ConfigDict(extra="forbid")

    def __init__(self, index: int, prompt_tokens: int, max_tokens: int, sent: float, **measured: Any) -> None:
        super().__init__(index=index, prompt_tokens=prompt_tokens, max_tokens=max_tokens, sent=sent, **measured)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times)

    @property
    def cancelled(self) -> bool:
        return self.error_kind == "cancelled"

    @property
    def ttft(self) -> float | None:
        return (self.chunk_times[0] - self.sent) if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        """Sent to the last chunk; for a request that failed or was abandoned (a deadline, Ctrl-C), sent to when
        it ended: the time it ran, never its first chunk's."""
        if not self.ok and self.ended is not None:
            return self.ended - self.sent
        return (self.chunk_times[-1] - self.sent) if self.chunk_times else None

    @property
    def n_tokens(self) -> int:
        return self.output_tokens if self.output_tokens is not None else len(self.chunk_times)

    @property
    def tpot(self) -> float | None:
        n = self.n_tokens
        if not self.ok or n < 2:
            return None
        return (self.e2e - self.ttft) / (n - 1)  # type: ignore[operator]

    @property
    def chunk_gaps(self) -> list[float]:
        t = self.chunk_times
        return [b - a for a, b in itertools.pairwise(t)]

    def record(self) -> Record:
        """What is saved of the request: every measured field as it stands, and its latencies in ms."""
        fields = {name: getattr(self, name) for name in Measured.model_fields}
        return Record.model_validate(
            fields | {"ttft_ms": _ms(self.ttft), "e2e_ms": _ms(self.e2e), "tpot_ms": _ms(self.tpot)}
        )

    def to_json(self) -> dict[str, Any]:
        """The saved record as JSON."""
        return self.record().model_dump(mode="json")


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


def summarize(values: list[float]) -> dict[str, float] | None:
    """P50/P90/P95/P99 (numpy, linear interpolation), min, max, mean; None for no data."""
    if not values:
        return None
    import numpy as np  # here, not at import: reading results needs no numpy

    a = np.asarray(values, dtype=float)
    out = {f"p{p}": float(np.percentile(a, p)) for p in PCTS}
    out.update(min=float(a.min()), max=float(a.max()), mean=float(a.mean()), count=int(a.size))
    return out


def meets(r: RequestRecord, slo: dict[str, float | None]) -> bool:
    if not r.ok:
        return False
    ttft, tpot = slo.get("ttft_ms"), slo.get("tpot_ms")
    if ttft is not None and (r.ttft or 0) * 1000 > ttft:
        return False
    return not (tpot is not None and r.tpot is not None and r.tpot * 1000 > tpot)


def aggregate(
    records: list[RequestRecord], wall_s: float, slo: dict[str, float | None] | None = None
) -> dict[str, Any]:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    cancelled = [r for r in measured if r.cancelled]
    toks = sum(r.n_tokens for r in ok)
    slo = slo or {}
    good = [r for r in ok if meets(r, slo)]
    sources = sorted({r.token_source for r in ok})
    return {
        "requests": len(measured),
        "completed": len(ok),
        "errors": len(measured) - len(ok) - len(cancelled),
        "cancelled": len(cancelled),
        "error_kinds": _kinds(measured),
        "wall_s": wall_s,
        "request_throughput_rps": len(ok) / wall_s if wall_s > 0 else 0.0,
        "output_token_throughput_tps": toks / wall_s if wall_s > 0 else 0.0,
        "goodput_rps": len(good) / wall_s if wall_s > 0 else 0.0,
        "slo": slo,
        "ttft_ms": summarize([r.ttft * 1000 for r in ok if r.ttft is not None]),
        "tpot_ms": summarize([r.tpot * 1000 for r in ok if r.tpot is not None]),
        "icl_ms": summarize([g * 1000 for r in ok for g in r.chunk_gaps]),
        "e2e_ms": summarize([r.e2e * 1000 for r in ok if r.e2e is not None]),
        "output_tokens": summarize([float(r.n_tokens) for r in ok]),
        "token_source": sources,
        "definitions": DEFINITIONS,
        "aiperf_names": AIPERF_NAMES,
    }


def _kinds(records: list[RequestRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if not r.ok and not r.cancelled:
            k = r.error_kind or "server"
            out[k] = out.get(k, 0) + 1
    return out
