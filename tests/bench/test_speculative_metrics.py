"""Acceptance rate and tokens per step from the per-request draft counters the server returns."""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.bench.metrics import RequestRecord
from toolchain.bench.speculative import read_outputs, summary


class _Result:
    def __init__(self, **outputs: int) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray[Any, Any] | None:
        v = self.outputs.get(name)
        return None if v is None else np.array([[v]], dtype=np.int32)


def _rec(i: int, out_tokens: int, drafted: int, accepted: int, *, warmup: bool = False) -> RequestRecord:
    r = RequestRecord(i, 10, out_tokens, sent=0.0, chunk_times=[1.0], output_tokens=out_tokens, warmup=warmup)
    read_outputs(_Result(total_draft_tokens=drafted // 2, total_accepted_draft_tokens=accepted // 2), r.perf)
    read_outputs(_Result(total_draft_tokens=drafted, total_accepted_draft_tokens=accepted), r.perf)  # cumulative
    read_outputs(_Result(), r.perf)  # a response without the counters keeps them
    return r


def test_acceptance_is_token_weighted_and_steps_follow_from_accepted_tokens() -> None:
    # request A: 40 tokens, 50 drafted, 30 accepted → 10 verify steps; B: 20 tokens, 50 drafted, 10 accepted → 10
    recs = [_rec(0, 40, 50, 30), _rec(1, 20, 50, 10), _rec(2, 99, 0, 0), _rec(3, 5, 100, 100, warmup=True)]
    s = summary(recs)
    assert s is not None
    assert s["requests"] == 2 and s["draft_tokens"] == 100 and s["accepted_draft_tokens"] == 40
    assert s["acceptance_rate"] == 0.4
    assert s["tokens_per_step"] == 60 / 20


def test_no_drafts_no_summary() -> None:
    assert summary([_rec(0, 10, 0, 0)]) is None
