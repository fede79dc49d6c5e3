"""SLO search against a server whose knee is known: a fixed number of decode slots, requests beyond wait."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.bench.sse_server import sse_server, sse_server_process
from tests.conftest import Cli
from toolchain.bench.options import BenchOptions
from toolchain.bench.result import Stats, Summary, parse_result
from toolchain.bench.run import BenchWorkload
from toolchain.bench.search import SloTargets, make_plan, make_targets, run_search, verdict
from toolchain.bench.workload import Request
from toolchain.errors import BenchError, UserInputError
from toolchain.pipeline.bench import assess

# Each request holds a slot for ~20 ms + 9 × 50 ms; one that waits for a slot starts ~470 ms late. A TTFT
# SLO of 250 ms sits between the two with >200 ms to spare either side (the test box is shared and busy), so
# the highest concurrency that meets it is exactly the number of slots.
FIRST_S, GAP_S, TOKENS, SLO_TTFT_MS = 0.02, 0.05, 10, 250.0


def _probes(s: dict[str, Any]) -> list[tuple[float, bool, float | None]]:
    return [(p["load"], p["passed"], p["ttft_ms_p99"]) for p in s["probes"]]


def _cfg(url: str, n: int = 12) -> tuple[BenchOptions, BenchWorkload]:
    """How to send (the options) and what (the workload): ``n`` requests, no warm-up, to model "m" at ``url``."""
    reqs = [Request(f"p{i}", 2, TOKENS) for i in range(n)]
    return BenchOptions(url=url, protocol="openai", requests=n, warmup=0, timeout=10.0), BenchWorkload("m", reqs)


@pytest.mark.slow
@pytest.mark.parametrize("slots", [3, 5])
def test_concurrency_search_finds_the_slot_count_exactly(slots: int) -> None:
    with sse_server_process(first_s=FIRST_S, gap_s=GAP_S, slots=slots) as (url, stats, _):
        res = run_search(*_cfg(url), make_plan("concurrency", limit=64), SloTargets(ttft_ms=SLO_TTFT_MS))
        assert stats()["busy_max"] == slots  # the server really had that many slots, and they were all used
    s = res.document()["search"]
    assert s["status"] == "found", s["message"]
    assert s["knee"]["load"] == slots, _probes(s)  # tolerance 1 stream: the exact knee
    assert s["knee"]["first_failing_load"] == slots + 1
    # grow 1, 2, 4, 8 ... then bisect: every probe is kept, in order, and the curve is sorted by load
    assert [p["load"] for p in s["probes"]][:3] == [1, 2, 4]
    assert [p["load"] for p in s["curve"]] == sorted(p["load"] for p in s["probes"])
    assert len(res.document()["runs"]) == len(s["probes"])
    assert all(not p["passed"] for p in s["probes"] if p["load"] > slots)
    assert all(p["passed"] for p in s["probes"] if p["load"] <= slots)
    assert s["knee"]["output_token_throughput_tps"] > 0
    assert assess(res) == (0, None)


@pytest.mark.slow
def test_rate_search_brackets_the_service_capacity() -> None:
    # 4 slots ÷ ~0.2 s per request = 20 req/s of capacity. Below it nothing waits; above it the queue grows
    # by (1/20 - 1/rate) s per request, so over 40 requests the SLO's 160 ms of slack is gone by ~22 req/s.
    with sse_server_process(first_s=0.01, gap_s=0.02, slots=4) as (url, _, _):
        plan = make_plan("rate", start=8, limit=64, tolerance=0.1)
        res = run_search(*_cfg(url, 40), plan, SloTargets(ttft_ms=170.0))
    s = res.document()["search"]
    assert s["status"] == "found", s["message"]
    knee, fail = s["knee"]["load"], s["knee"]["first_failing_load"]
    assert fail - knee <= 0.1 * knee + 1e-9  # within the stopping tolerance
    assert 16 <= knee <= 24, _probes(s)  # the capacity, within one search step


@pytest.mark.slow
def test_unmet_at_the_lowest_load_says_so_with_the_figures() -> None:
    with sse_server(first_s=0.3, gap_s=0.001, slots=4) as (url, _):
        res = run_search(*_cfg(url, 6), make_plan("concurrency"), SloTargets(ttft_ms=40.0))
    s = res.document()["search"]
    assert s["status"] == "unmet" and s["knee"] is None and len(s["probes"]) == 1
    code, reason = assess(res)
    assert code == 1 and reason is not None
    assert "not met even at the lowest load, concurrency 1" in reason
    assert "P99 TTFT" in reason and "> 40 ms" in reason and "6/6 completed" in reason


@pytest.mark.slow
def test_server_dying_mid_search_keeps_the_partial_curve() -> None:
    with sse_server(first_s=FIRST_S, gap_s=GAP_S, slots=8) as (url, stats):
        seen: list[str] = []

        def progress(stage: str, *a: Any, **k: Any) -> None:
            if stage.startswith("SLO search") and "probe 3" in stage and not seen:
                seen.append(stage)
                stats.kill()

        res = run_search(*_cfg(url, 8), make_plan("concurrency"), SloTargets(ttft_ms=SLO_TTFT_MS), progress)
    s = res.document()["search"]
    assert seen and s["status"] == "server-gone"
    assert [p["passed"] for p in s["probes"][:2]] == [True, True]  # what was measured before stays
    code, reason = assess(res)
    assert code == 1 and reason is not None and "partial curve is kept" in reason


def test_server_unreachable_at_the_first_probe_is_the_plain_error() -> None:
    with sse_server() as (url, stats):
        stats.kill()
        with pytest.raises(BenchError, match="cannot reach"):
            run_search(*_cfg(url, 2), make_plan("concurrency"), SloTargets(ttft_ms=10.0))


def test_verdict_names_every_miss() -> None:
    summary = Summary(
        requests=10,
        completed=9,
        errors=1,
        wall_s=1.0,
        goodput_rps=7.0,
        ttft_ms=Stats(p99=120.0),
        tpot_ms=Stats(p99=30.0),
        output_token_throughput_tps=90.0,
        request_throughput_rps=9.0,
        token_source=["server"],
    )
    ok, reasons, figures = verdict(summary, SloTargets(ttft_ms=100, tpot_ms=40, goodput=0.9))
    assert not ok and figures["goodput_fraction"] == pytest.approx(0.7)
    assert reasons == ["P99 TTFT 120.0 ms > 100 ms", "goodput 70.0% of requests < 90%"]
    assert verdict(summary, SloTargets(ttft_ms=150, tpot_ms=40, goodput=0.7))[0]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"mode": "latency"}, "--slo-search takes concurrency or rate"),
        ({"mode": "concurrency", "start": 0}, "--slo-start must be a positive number"),
        ({"mode": "concurrency", "start": 1.5}, "whole number"),
        ({"mode": "concurrency", "start": 8, "limit": 4}, "below --slo-start"),
        ({"mode": "rate", "tolerance": 2}, "fraction of the rate"),
        ({"mode": "rate", "limit": float("nan")}, "--slo-max must be a positive number"),
        ({"mode": "rate", "max_probes": 1}, "--slo-max-probes must be at least 2"),
    ],
)
def test_bad_search_flags_are_one_line_errors(kwargs: dict[str, Any], text: str) -> None:
    mode = kwargs.pop("mode")
    with pytest.raises(UserInputError, match=text):
        make_plan(mode, **kwargs)


def test_targets_come_from_flags_else_the_spec() -> None:
    assert make_targets({"ttft_ms": 500.0, "tpot_ms": 40.0}, None, 20.0, None) == SloTargets(500.0, 20.0, None)
    with pytest.raises(UserInputError, match="no SLO to search against"):
        make_targets({}, None, None, None)
    with pytest.raises(UserInputError, match="--slo-goodput is a fraction"):
        make_targets({}, None, None, 1.5)


def test_slo_still_met_at_the_bound_says_the_knee_is_higher(tmp_path: Path) -> None:
    with sse_server(first_s=0.01, gap_s=0.001, slots=2) as (url, _):
        res = run_search(*_cfg(url, 8), make_plan("concurrency", limit=3), SloTargets(ttft_ms=SLO_TTFT_MS))
    saved = json.loads(json.dumps(res.document()))  # the saved form
    s = saved["search"]
    assert s["status"] == "bound" and s["knee"]["load"] == 3 and [p["load"] for p in s["probes"]] == [1, 2, 3]
    assert "raise --slo-max" in s["message"] and "no knee within the bounds" in s["message"]
    assert assess(parse_result(saved, "r.json")) == (0, None)


@pytest.mark.slow
def test_the_loop_from_a_measured_knee_to_a_fleet_size(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, valid_result: Callable[[Any], None]
) -> None:
    """bench --spec --slo-search → result → bench report redraws it → plan --measured sizes the fleet from it."""
    from tests.conftest import write_tiny_spec

    spec = write_tiny_spec(tmp_path / "tiny.yaml", tiny_checkpoint)
    out = tmp_path / "knee.json"
    with sse_server_process(first_s=FIRST_S, gap_s=GAP_S, slots=2) as (url, _, _):
        r = cli(
            "bench",
            "--url",
            url,
            "--protocol",
            "openai",
            "--model",
            "m",
            "--spec",
            spec,
            "--output-tokens",
            str(TOKENS),
            "--requests",
            "8",
            "--warmup",
            "0",
            "--slo-search",
            "concurrency",
            "--slo-ttft-ms",
            str(SLO_TTFT_MS),
            "--save",
            out,
        )
    assert r.exit_code == 0, r.output
    assert "SLO search: knee at concurrency 2" in r.stderr
    saved = json.loads(out.read_text())
    valid_result(saved)  # against docs/bench-result.schema.json (tests/bench/conftest.py)
    assert saved["search"]["knee"]["load"] == 2 and saved["provenance"]["cell"]
    r = cli("bench", "report", out, "--out", tmp_path / "rep")
    assert r.exit_code == 0 and (tmp_path / "rep" / "slo_search.png").is_file()
    r = cli("plan", spec, "--measured", out, "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    tps = saved["search"]["knee"]["output_token_throughput_tps"]
    assert m["measured_fleet"]["tok_s_per_instance"] == tps
    assert m["measured_fleet"]["total_gpus"] == math.ceil(round(1 * 16 / tps / 0.75 * 1.2, 9))
    # measured with 10 output tokens, the spec's traffic has 16: said, not hidden
    assert any("the capacity holds for the measured shape" in n for n in m["notes"])


@pytest.mark.slow
def test_probes_above_the_budget_are_sized_to_their_load() -> None:
    """A bound (16) above the --requests budget (8): the high probes send 4 requests per stream, not the same 8
    requests at once; every probe's record and progress line say how many it sent and why."""
    from toolchain.bench.search import STEADY_WAVES

    lines: list[str] = []

    def progress(stage: str, *a: Any, **k: Any) -> None:
        if stage.startswith("SLO search"):
            lines.append(stage)

    with sse_server(first_s=0.001, gap_s=0.001) as (url, stats):
        res = run_search(*_cfg(url, 8), make_plan("concurrency", limit=16), SloTargets(ttft_ms=10_000.0), progress)
        arrivals = len(stats.arrivals)
    s = res.document()["search"]
    assert s["status"] == "bound" and [p["load"] for p in s["probes"]] == [1, 2, 4, 8, 16]
    sent = [p["requests"] for p in s["probes"]]
    assert sent == [8, 8, 16, 32, 64] == [max(8, STEADY_WAVES * int(p["load"])) for p in s["probes"]]
    assert arrivals == sum(sent)  # the server saw them all: no probe is a burst of the budget
    assert [r["summary"]["requests"] for r in res.document()["runs"]] == sent
    assert s["probes"][-1]["sizing"] == "64 requests: 4 per stream × 16 streams (above --requests 8)"
    assert s["probes"][0]["sizing"] == "8 requests: --requests 8 (≥ 4 per stream × 1 stream)"
    assert lines[-1].endswith("[grow], 64 requests: 4 per stream × 16 streams (above --requests 8)"), lines
    # the requests beyond the budget are new prompts of the same workload when there is a source, else repeats
    prompts = stats.prompts[-64:]
    assert len(set(prompts)) == 8


def test_probe_size_rules() -> None:
    from toolchain.bench.search import MAX_PROBE_REQUESTS, probe_size

    conc = make_plan("concurrency")
    assert probe_size(conc, 3, 64) == (64, "--requests 64 (≥ 4 per stream × 3 streams)")
    assert probe_size(conc, 256, 64) == (1024, "4 per stream × 256 streams (above --requests 64)")
    assert probe_size(conc, 1024, 64)[0] == MAX_PROBE_REQUESTS == 4096
    assert probe_size(conc, 2048, 64) == (4096, "4 per stream × 2048 streams, capped at 4096")
    rate = make_plan("rate")
    assert probe_size(rate, 50, 64) == (200, "50 req/s × 4 s (above --requests 64)")
    assert probe_size(make_plan("rate", duration_s=10), 50, 64) == (500, "50 req/s × 10 s (above --requests 64)")
    assert probe_size(rate, 10, 64)[0] == 64


def test_a_larger_probe_takes_the_workloads_next_requests() -> None:
    """With a workload source (bench builds one), a larger probe sends new prompts, not the budget's again."""
    from toolchain.bench.workload import RequestSource

    def endless() -> Any:
        i = 0
        while True:
            yield Request(f"p{i}", 2, TOKENS)
            i += 1

    src = RequestSource(endless())
    work = BenchWorkload("m", src.first(9), more=src.first)
    got = work.requests_for(1, 20)
    assert [r.prompt for r in got] == [f"p{i}" for i in range(21)]
    assert [r.prompt for r in work.requests_for(1, 4)] == ["p0", "p1", "p2", "p3", "p4"]
    plain = BenchWorkload("m", src.first(3))
    assert [r.prompt for r in plain.requests_for(1, 5)] == ["p0", "p1", "p2", "p1", "p2", "p1"]


def test_a_short_dataset_is_sent_again_whole() -> None:
    """A source that runs out (a dataset file of 5 prompts, a budget of 3): the larger probe cycles all 5."""
    every = [Request(f"d{i}", 2, TOKENS) for i in range(5)]
    work = BenchWorkload("m", every[:3], more=lambda n: every[:n])
    assert [r.prompt for r in work.requests_for(0, 7)] == ["d0", "d1", "d2", "d3", "d4", "d0", "d1"]


def test_when_every_request_fails_the_reason_quotes_the_server() -> None:
    """An unmet search whose requests all failed says why in the server's words (before: "all 4 requests failed")."""
    with sse_server(mode="503") as (url, _):
        res = run_search(*_cfg(url, 4), make_plan("concurrency"), SloTargets(ttft_ms=100.0))
    s = res.document()["search"]
    assert s["status"] == "unmet"
    assert s["probes"][0]["reasons"] == ['all 4 requests failed: HTTP 503: b\'{"error": "overloaded"}\'']
    assert "all 4 requests failed: HTTP 503" in s["message"]
