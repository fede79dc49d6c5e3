"""Speculative-decoding figures from what the server reports per request.

TensorRT-LLM returns ``acceptance_rate``, ``total_accepted_draft_tokens`` and ``total_draft_tokens`` with
every response of a request that set ``return_perf_metrics`` (docs/speculative-and-lora.md §3). Over a run:
acceptance rate = Σ accepted ÷ Σ drafted (token-weighted; requests without drafts do not count), and,
since each verify step emits its accepted drafts plus one token of the target,
steps = output tokens − accepted and accepted tokens per step = output tokens ÷ steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

OUTPUTS = ("total_accepted_draft_tokens", "total_draft_tokens")


def read_outputs(result: Any, perf: dict[str, float]) -> None:
    """Keep the draft counters of one streamed or final response (they are cumulative per request)."""
    for name in OUTPUTS:
        v = result.as_numpy(name)
        if v is not None and v.size:
            perf[name] = max(perf.get(name, 0), int(v.reshape(-1)[0]))


def summary(records: Iterable[Any]) -> dict[str, Any] | None:
    """Acceptance over the measured requests; None when the server reported no draft tokens."""
    drafted = accepted = out_tokens = n = 0
    for r in records:
        if r.warmup or not r.ok:
            continue
        d = int(r.perf.get("total_draft_tokens", 0))  # counters: whole numbers however the record holds them
        if d <= 0:
            continue
        n += 1
        drafted += d
        accepted += int(r.perf.get("total_accepted_draft_tokens", 0))
        out_tokens += r.n_tokens
    if not drafted:
        return None
    steps = out_tokens - accepted
    return {
        "requests": n,
        "draft_tokens": drafted,
        "accepted_draft_tokens": accepted,
        "acceptance_rate": accepted / drafted,
        "tokens_per_step": out_tokens / steps if steps > 0 else None,
    }
