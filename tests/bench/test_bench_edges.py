"""Benchmark edge cases: connection reuse, a busy client, late sends, 503, garbage answers, exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.bench.sse_server import sse_server
from tests.bench.workloads import bench_cmd
from tests.conftest import REPO, Cli
from tests.helpers import BlockingTarget, bench_requests, bench_result
from toolchain.bench.loadgen import _run, run_load
from toolchain.bench.metrics import RequestRecord, aggregate
from toolchain.bench.result import Load
from toolchain.bench.run import assess, client_health


@pytest.mark.slow
def test_openai_stream_reuses_connections_and_ttft_matches_the_server() -> None:
    with sse_server(first_s=0.03, gap_s=0.004) as (url, stats):
        out = run_load("openai", url, "m", bench_requests(48), Load(concurrency=4), warmup=0)
    s = aggregate(out.records, out.wall_s)
    assert s["completed"] == 48, [r.error for r in out.records if r.error]
    # one keep-alive connection per concurrent stream (+1 for the /v1/models check), not one per request
    assert stats.connections <= 4 + 1, stats.connections
    client = [r.ttft for r in out.records if r.ttft is not None]
    gap_ms = (float(np.median(client)) - float(np.median(stats.server_ttft_s))) * 1000
    # ~1 ms on an idle machine; the bound leaves room for a loaded CI box (client and server share the GIL)
    assert 0 <= gap_ms < 10, f"client TTFT is {gap_ms:.1f} ms above the server's own timing"


def _run_fake(target: Any, load: Load, n: int) -> Any:
    return asyncio.run(_run(target, bench_requests(n), load, 0, 0, False, 3, {}))


def test_busy_client_is_reported_in_concurrency_mode() -> None:
    out = _run_fake(BlockingTarget(block_s=0.06), Load(concurrency=4), 12)
    health = client_health(out)
    assert health["loop_lag_ms_p99"] > 40
    assert any("client is the bottleneck" in w for w in health["warnings"])
    calm = client_health(_run_fake(BlockingTarget(block_s=0.0), Load(concurrency=4), 12))
    assert not any("bottleneck" in w for w in calm.get("warnings", []))


def test_send_lag_is_measured_when_the_request_actually_goes_out() -> None:
    # 10 requests due 0.1 ms apart are all created in one tick; each blocks 40 ms before it sends, so the
    # last one goes out ~360 ms late even though its task was created on time.
    out = _run_fake(BlockingTarget(block_s=0.04), Load(rate=10000), 10)
    assert max(out.lag_s) > 0.3
    assert client_health(out)["late_sends"] >= 5


def test_http_503_is_a_server_error_not_an_unreachable_server() -> None:
    with sse_server(mode="503") as (url, _):
        out = run_load("openai", url, "m", bench_requests(6), Load(concurrency=1), warmup=0)
    assert out.stop is None and out.interrupted is None  # the run went on: the server is there
    assert len(out.records) == 6
    assert all(r.error_kind == "server" and "HTTP 503" in (r.error or "") for r in out.records)
    s = aggregate(out.records, out.wall_s)
    assert s["errors"] == 6 and s["error_kinds"] == {"server": 6}


@pytest.mark.parametrize("mode", ["garbage", "json"])
def test_garbage_answers_are_errors_with_a_reason(mode: str) -> None:
    with sse_server(mode=mode) as (url, _):
        out = run_load("openai", url, "m", bench_requests(3), Load(concurrency=1), warmup=0)
    assert all(r.error and r.error_kind == "protocol" for r in out.records), [r.error for r in out.records]
    res = bench_result([{"label": "concurrency=1", "summary": aggregate(out.records, out.wall_s)}])
    code, reason = assess(res)
    assert code == 1 and reason and "all 3 requests" in reason and "protocol 3" in reason


def test_assess_exit_codes() -> None:
    ok = RequestRecord(0, 1, 2, 0.0, chunk_times=[0.1, 0.2], output_tokens=2)
    bad = RequestRecord(1, 1, 2, 0.0, error="HTTP 500", error_kind="server")
    run = {"label": "c=1", "summary": aggregate([ok, bad], 1.0)}
    assert assess(bench_result([run])) == (0, None)
    assert assess(bench_result([run], stop="interrupted", interrupted="x"))[0] == 130
    assert assess(bench_result([run], stop="server-gone", interrupted="server unreachable")) == (
        1,
        "server unreachable",
    )
    assert assess(bench_result([run]).model_copy(update={"runs": []}))[0] == 1


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_all_failed_run_exits_1_and_keeps_the_result(
    tiny_checkpoint: Path, tmp_path: Path, valid_result: Callable[[Any], None]
) -> None:
    with sse_server(mode="503") as (url, _):
        p = subprocess.run(
            bench_cmd(url, tiny_checkpoint, tmp_path / "r.json", "--requests", "3"),
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
    assert p.returncode == 1, p.stderr
    assert "Error: the benchmark did not measure what was asked: all 3 requests" in p.stderr
    assert "failed (server 3); first: HTTP 503" in p.stderr  # why, in the server's words
    assert "Traceback" not in p.stderr
    saved = json.loads((tmp_path / "r.json").read_text())
    valid_result(saved)  # against docs/bench-result.schema.json (tests/bench/conftest.py)
    assert saved["runs"][0]["summary"]["error_kinds"] == {"server": 3}


@pytest.mark.slow
def test_ctrl_c_marks_in_flight_requests_cancelled_and_exits_130(
    tiny_checkpoint: Path, tmp_path: Path, valid_result: Callable[[Any], None]
) -> None:
    # each request streams for ~1 s; interrupt while two are in flight
    with sse_server(first_s=0.05, gap_s=0.2) as (url, _):
        proc = subprocess.Popen(
            bench_cmd(url, tiny_checkpoint, tmp_path / "r.json", "--requests", "40", "--concurrency", "2"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        assert proc.stderr is not None
        for line in proc.stderr:  # narration: wait until the load point has started
            if "load concurrency=2" in line:
                break
        time.sleep(2.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    saved = json.loads((tmp_path / "r.json").read_text())
    valid_result(saved)  # against docs/bench-result.schema.json (tests/bench/conftest.py)
    assert saved["stop"] == "interrupted"
    s = saved["runs"][0]["summary"]
    assert s["completed"] >= 1 and s["cancelled"] >= 1 and s["errors"] == 0, s
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_infer_streams_the_answer_to_stdout(cli: Cli) -> None:
    with sse_server(first_s=0.01, gap_s=0.001) as (url, _):
        r = cli("infer", "hello", "--url", url, "--protocol", "openai", "--model", "m", "--max-tokens", "3")
        assert r.exit_code == 0, r.output
        assert r.stdout == " w0 w1 w2\n"
        assert "3 output tokens" in r.stderr
        r = cli("infer", "hello", "--url", url, "--protocol", "openai", "--model", "m", "--max-tokens", "2", "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["text"] == " w0 w1"
    with sse_server(mode="503") as (url, _):
        r = cli("infer", "hello", "--url", url, "--protocol", "openai", "--model", "m")
    assert r.exit_code == 1 and "Error: the request failed (server): HTTP 503" in r.stderr


@pytest.mark.slow
def test_server_killed_mid_bench_exits_1_and_keeps_the_partial_result(
    tiny_checkpoint: Path, tmp_path: Path, valid_result: Callable[[Any], None]
) -> None:
    with sse_server(first_s=0.02, gap_s=0.03) as (url, _):
        proc = subprocess.Popen(
            bench_cmd(url, tiny_checkpoint, tmp_path / "r.json", "--requests", "60"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            if "load concurrency=1" in line:
                break
        time.sleep(1.5)
    # the server is gone (its listening socket closed); the bench must notice, stop and say so
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "Error: the benchmark did not measure what was asked: server unreachable during the run" in stderr
    saved = json.loads((tmp_path / "r.json").read_text())
    valid_result(saved)  # against docs/bench-result.schema.json (tests/bench/conftest.py)
    assert saved["stop"] == "server-gone"
    s = saved["runs"][0]["summary"]
    assert s["completed"] >= 1 and s["error_kinds"].get("connection", 0) >= 3 and s["requests"] < 60
