"""Issue 47 (F): a request abandoned at its deadline (--timeout) records the time it ran as its e2e, not the time
of its first chunk. Before, a request that streamed its first token after a few ms and was abandoned at
``--timeout 4`` recorded e2e_ms = ttft_ms = 2-7 ms. Measured against the slot-limited stand-in server."""

from __future__ import annotations

from toolchain.bench.loadgen import run_load
from toolchain.bench.metrics import RequestRecord, aggregate
from toolchain.bench.result import Load
from toolchain.bench.standin import SERVED_MODEL, StandIn, StandInOptions
from toolchain.bench.workload import Request

DEADLINE_S = 0.6
CEILING_S = 30 * DEADLINE_S  # many times the deadline: a loaded machine never misses it, a hang would


def test_an_abandoned_request_records_the_time_it_ran() -> None:
    # the first token after 5 ms, then one every 200 ms: 40 tokens take 8 s, far past the deadline
    opts = StandInOptions(slots=1, first_token_ms=5.0, token_ms=200.0, port=0)
    with StandIn(opts) as srv:
        out = run_load(
            "openai", srv.url, SERVED_MODEL, [Request("hello", 1, 40)], Load(concurrency=1), warmup=0,
            timeout=DEADLINE_S,
        )  # fmt: skip
    (rec,) = [r for r in out.records if not r.warmup]
    assert rec.error_kind == "timeout" and "--timeout" in (rec.error or ""), rec.error
    assert rec.chunk_times, "the stand-in streamed no token before the deadline"
    ttft, e2e = rec.ttft, rec.e2e
    assert ttft is not None and e2e is not None
    assert DEADLINE_S <= e2e < CEILING_S, e2e  # the time it ran: at least the deadline it was abandoned at
    assert e2e > ttft and e2e >= rec.chunk_times[-1] - rec.sent
    doc = rec.to_json()
    assert doc["e2e_ms"] >= DEADLINE_S * 1000 and doc["e2e_ms"] > doc["ttft_ms"]
    assert doc["ended"] is not None
    assert aggregate(out.records, out.wall_s)["completed"] == 0  # an abandoned request is no completed one


def test_a_completed_request_keeps_its_last_chunk_as_e2e() -> None:
    rec = RequestRecord(0, 1, 2, sent=10.0, chunk_times=[10.1, 10.3], ended=10.9)
    assert rec.ok and rec.e2e is not None and abs(rec.e2e - 0.3) < 1e-9  # reading [DONE] is not part of it
    failed = RequestRecord(1, 1, 2, sent=10.0, chunk_times=[10.1], ended=14.0, error="x", error_kind="timeout")
    assert failed.e2e is not None and abs(failed.e2e - 4.0) < 1e-9 and failed.ttft is not None
