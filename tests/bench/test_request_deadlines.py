"""Every bench request has a total deadline as well as an idle one, and every failure is one classified line.

Servers on 127.0.0.1 (tests/bench/stall_servers.py) accept and never send, send headers and stall, trickle a
byte every 0.5 s (which no idle timeout ever catches), stop or close mid-body, send valid JSON in the wrong
shape, or die mid-run. Deadlines here are short (1-2 s); the assertions are on what was recorded, with only
pytest-timeout as a generous ceiling (a request that no deadline bounds hangs until it fires).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.bench.stall_servers import stall_http, stall_triton
from tests.bench.workloads import bench_cmd
from tests.conftest import Cli
from tests.helpers import bench_result
from toolchain.bench.loadgen import RunOutcome, run_load
from toolchain.bench.metrics import aggregate
from toolchain.bench.result import Load
from toolchain.bench.run import assess
from toolchain.bench.workload import Request

pytestmark = pytest.mark.timeout(90)


def _reqs(n: int) -> list[Request]:
    return [Request(f"p{i}", 2, 4) for i in range(n)]


def _openai(mode: str, n: int = 2, **kw: float) -> RunOutcome:
    with stall_http(mode) as (url, seen):
        out = run_load("openai", url, "m", _reqs(n), Load(concurrency=1), warmup=0, **kw)  # type: ignore[arg-type]
    assert seen.posts == n  # every request was really sent
    return out


def _all_timeouts(out: RunOutcome, n: int, flag: str) -> None:
    assert out.stop is None and len(out.records) == n
    for r in out.records:
        assert r.error_kind == "timeout" and flag in (r.error or ""), r.error
        assert "\n" not in (r.error or "")
    s = aggregate(out.records, out.wall_s)
    assert s["requests"] == n and s["errors"] == n and s["error_kinds"] == {"timeout": n}


@pytest.mark.slow
def test_a_trickling_openai_stream_ends_at_the_request_deadline() -> None:
    # a byte every 0.5 s: well inside the 60 s default idle timeout, forever; only the total deadline ends it
    out = _openai("trickle", timeout=2.0)
    _all_timeouts(out, 2, "--timeout")
    assert "request deadline of 2 s" in (out.records[0].error or "")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["silent", "headers", "mid-body"])
def test_a_silent_openai_server_ends_at_the_idle_deadline(mode: str) -> None:
    # the total deadline (60 s) is far away: the idle one (1 s) is what ends each request
    out = _openai(mode, timeout=60.0, idle_timeout=1.0)
    _all_timeouts(out, 2, "--idle-timeout")
    assert ("next chunk" if mode == "mid-body" else "first token") in (out.records[0].error or "")


def test_an_openai_stream_closed_mid_body_is_a_connection_error_in_one_line() -> None:
    out = _openai("close-mid-body", timeout=10.0)
    assert all(r.error_kind == "connection" and "\n" not in (r.error or "") for r in out.records)


def test_valid_json_in_the_wrong_shape_is_a_protocol_error_in_words() -> None:
    out = _openai("wrong-shape", n=3, timeout=10.0)
    for r in out.records:
        assert r.error_kind == "protocol", r.error
        assert "'choices' is a JSON number, not a list" in (r.error or "")
        assert "TypeError" not in (r.error or "") and "not iterable" not in (r.error or "")
    s = aggregate(out.records, out.wall_s)
    assert s["error_kinds"] == {"protocol": 3}  # counted apart from "server"
    code, reason = assess(bench_result([{"label": "c=1", "summary": s}]))
    assert code == 1 and reason and "protocol 3" in reason


@pytest.mark.slow
def test_a_trickling_triton_stream_ends_at_the_request_deadline() -> None:
    with stall_triton("trickle") as tr:
        out = run_load("triton", tr.url, "m", _reqs(2), Load(concurrency=1), warmup=0, timeout=2.0)
    assert tr.streams == 2
    _all_timeouts(out, 2, "--timeout")
    assert all(r.chunk_times for r in out.records)  # it was sending: an idle timeout would never fire


@pytest.mark.slow
def test_a_silent_triton_stream_ends_at_the_idle_deadline() -> None:
    with stall_triton("silent") as tr:
        out = run_load("triton", tr.url, "m", _reqs(2), Load(concurrency=1), warmup=0, timeout=60.0, idle_timeout=1.0)
    _all_timeouts(out, 2, "--idle-timeout")


@pytest.mark.slow
def test_a_triton_that_never_answers_the_model_config_ends_the_check() -> None:
    from toolchain.errors import BenchError

    with stall_triton("config-silent") as tr, pytest.raises(BenchError) as err:
        run_load("triton", tr.url, "m", _reqs(1), Load(concurrency=1), warmup=0, timeout=60.0, idle_timeout=1.0)
    assert "sent no config for model 'm' within 1 s (--idle-timeout)" in err.value.message


@pytest.mark.slow
def test_triton_killed_mid_bench_is_one_classified_line() -> None:
    with stall_triton("ok") as tr:
        threading.Timer(1.0, tr.stop).start()
        out = run_load("triton", tr.url, "m", _reqs(40), Load(concurrency=2), warmup=0, timeout=10.0)
    assert out.stop == "server-gone" and out.interrupted is not None
    assert "\n" not in out.interrupted and "AioRpcError" not in out.interrupted, out.interrupted
    assert out.interrupted.startswith("server unreachable during the run: the server went away (gRPC UNAVAILABLE")
    assert out.interrupted.endswith(")") or out.interrupted.endswith("…")  # whole words, never cut mid-word
    failed = [r for r in out.records if r.error]
    assert failed and all(r.error_kind == "connection" and "\n" not in (r.error or "") for r in failed)
    assert any(r.ok for r in out.records)  # what was measured before is kept


def test_one_line_cuts_at_a_word_and_says_so() -> None:
    from toolchain.bench.loadgen import one_line

    text = "status = UNAVAILABLE\n\tdetails = " + "word " * 80
    line = one_line(text, 60)
    assert "\n" not in line and "\t" not in line and len(line) <= 60 and line.endswith(" word…"), line


def test_classify_names_kinds_for_foreign_exceptions() -> None:
    from toolchain.bench.loadgen import classify

    assert classify(TypeError("'int' object is not iterable"))[0] == "protocol"
    assert classify(ConnectionResetError("reset"))[0] == "connection"
    assert classify(RuntimeError("boom")) == ("server", "RuntimeError: boom")


@pytest.mark.slow
def test_bench_cli_ends_on_time_and_reports_the_timeouts(tiny_checkpoint: Path, tmp_path: Path, cli: Cli) -> None:
    """`toolchain bench --timeout 2` against a trickling server: the run ends, each request is a timeout."""
    with stall_http("trickle") as (url, _):
        args = bench_cmd(url, tiny_checkpoint, tmp_path / "r.json", "--requests", "2", "--timeout", "2")[3:]
        res = cli(*args)
    assert res.exit_code == 1, res.output
    assert "all 2 requests" in res.output and "timeout 2" in res.output and "Traceback" not in res.output
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["runs"][0]["summary"]["error_kinds"] == {"timeout": 2}


def test_a_bad_idle_timeout_is_refused(cli: Cli) -> None:
    res = cli("bench", "--url", "http://127.0.0.1:9", "--protocol", "openai", "--idle-timeout", "0")
    assert res.exit_code == 2 and "--idle-timeout must be a positive number of seconds" in res.output, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("event", "chat", "said"),
    [
        ([1, 2], False, "a JSON list, not an object"),
        ({"choices": 7}, False, "'choices' is a JSON number, not a list"),
        ({"choices": ["x"]}, False, "a choice is a JSON string, not an object"),
        ({"choices": [{"text": 5}]}, False, "the completion text is a JSON number, not a string"),
        ({"choices": [{"delta": "hi"}]}, True, "'delta' is a JSON string, not an object"),
        ({"choices": [], "usage": {"completion_tokens": "3"}}, False, "is a JSON string, not an integer"),
        ({"choices": [], "usage": 3}, False, "'usage' is a JSON number, not an object"),
    ],
)
def test_wrong_shapes_are_said_in_words(event: object, chat: bool, said: str) -> None:
    from toolchain.bench.loadgen import _wrong_shape

    assert said in (_wrong_shape(event, chat) or "")
    assert _wrong_shape({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}}, False) is None
    assert _wrong_shape({"choices": [{"delta": {"content": "ok"}}]}, True) is None
