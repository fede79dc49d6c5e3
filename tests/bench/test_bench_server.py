"""The load generator against a real Triton on 127.0.0.1 serving a model with known delays."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import bench_result
from toolchain.bench.loadgen import run_load
from toolchain.bench.metrics import aggregate
from toolchain.bench.options import BenchOptions
from toolchain.bench.result import Load
from toolchain.bench.run import BenchWorkload, run_bench
from toolchain.bench.workload import Request
from toolchain.errors import BenchError
from toolchain.triton import server as S

pytestmark = [pytest.mark.slow, pytest.mark.server]
HERE = Path(__file__).resolve().parent
FIRST_MS, GAP_MS = 80.0, 25.0


def _config(name: str, decoupled: bool, fail_every: int = 0) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
model_transaction_policy {{ decoupled: {str(decoupled).lower()} }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_perf_metrics" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ count: {1 if fail_every else 4} kind: KIND_CPU }} ]
parameters {{ key: "first_delay_ms" value: {{ string_value: "{FIRST_MS}" }} }}
parameters {{ key: "token_delay_ms" value: {{ string_value: "{GAP_MS}" }} }}
parameters {{ key: "fail_every" value: {{ string_value: "{fail_every}" }} }}
"""


def make_repo(root: Path) -> Path:
    for name, dec, fail in (("delayed", True, 0), ("flaky", True, 3), ("unary", False, 0)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_config(name, dec, fail))
        shutil.copyfile(HERE / "delay_model.py", root / name / "1" / "model.py")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S.Server]:
    repo = make_repo(tmp_path_factory.mktemp("delayrepo"))
    seen: list[tuple[str, str | None]] = []
    srv = S.start(
        repo,
        ports=S.Ports(S.free_port(), S.free_port(), S.free_port()),
        ready_timeout=120,
        log_path=tmp_path_factory.mktemp("log") / "t.log",
        progress=lambda stage, done=None, total=None, *, unit="", message=None: seen.append((stage, message)),
    )
    srv.start_progress = seen  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def _reqs(n: int, tokens: int = 6) -> list[Request]:
    return [Request(f"prompt {i}", 2, tokens) for i in range(n)]


def test_ttft_and_itl_match_the_known_delays(server: S.Server) -> None:
    out = run_load("triton", server.grpc_url, "delayed", _reqs(9), Load(concurrency=2), warmup=1)
    s = aggregate(out.records, out.wall_s)
    assert s["completed"] == 8 and s["errors"] == 0
    assert abs(s["ttft_ms"]["p50"] - FIRST_MS) < 20, s["ttft_ms"]
    assert abs(s["icl_ms"]["p50"] - GAP_MS) < 10, s["icl_ms"]
    assert abs(s["tpot_ms"]["p50"] - GAP_MS) < 10, s["tpot_ms"]
    assert all(r.n_tokens == 6 and r.token_source == "server" for r in out.records if not r.warmup)
    assert s["output_token_throughput_tps"] == pytest.approx(48 / out.wall_s)


def test_errors_mid_run_are_counted_and_the_run_continues(server: S.Server) -> None:
    out = run_load("triton", server.grpc_url, "flaky", _reqs(9, 2), Load(concurrency=1), warmup=0)
    s = aggregate(out.records, out.wall_s)
    assert s["errors"] == 3 and s["completed"] == 6 and out.interrupted is None
    assert all("injected failure" in r.error for r in out.records if r.error)
    out = run_load("triton", server.grpc_url, "flaky", _reqs(9, 2), Load(concurrency=1), warmup=0, stop_on_error=True)
    assert out.interrupted and "stopped on error" in out.interrupted
    assert len(out.records) < 9


def test_server_start_reports_the_log_and_model_load_states(server: S.Server) -> None:
    seen = server.start_progress  # type: ignore[attr-defined]
    assert seen[0][0].startswith("tritonserver starting: log ") and str(server.log_path) in seen[0][0]
    states = [m for _, m in seen[1:] if m]
    # the repository index API names each model with its state while the server comes up
    assert states and all(name in states[-1] for name in ("delayed", "flaky", "unary")), seen
    assert S.model_states(server.http_url) == "delayed READY, flaky READY, unary READY"


def test_infer_streams_text_from_triton(server: S.Server) -> None:
    from toolchain.bench.infer import infer

    pieces: list[str] = []
    res = infer("triton", server.grpc_url, "delayed", "hi", max_tokens=3, on_text=pieces.append)
    assert pieces == ["t0", "t1", "t2"] and res.text == "t0t1t2" and res.output_tokens == 3
    assert res.ttft_ms is not None and abs(res.ttft_ms - FIRST_MS) < 40


def test_streaming_a_non_decoupled_model_is_refused(server: S.Server) -> None:
    with pytest.raises(BenchError, match="not decoupled"):
        run_load("triton", server.grpc_url, "unary", _reqs(2), Load(concurrency=1))


def test_unreachable_server_fails_fast_naming_the_url() -> None:
    """A refused connection is an error at once, not a wait for the request deadlines (raised to ten minutes
    here, so a client that waited for them would take ten minutes; the ceiling is a tenth of that)."""
    port = S.free_port()
    t = time.monotonic()
    with pytest.raises(BenchError, match=f"127.0.0.1:{port}"):
        run_load("triton", f"127.0.0.1:{port}", "delayed", _reqs(2), Load(concurrency=1), timeout=600, idle_timeout=600)
    assert time.monotonic() - t < 60


def test_rate_mode_and_metrics_scrape(server: S.Server) -> None:
    opts = BenchOptions(
        url=server.grpc_url, rate="10", poisson=True, requests=10, warmup=1, metrics_url=server.metrics_url
    )
    work = BenchWorkload("delayed", _reqs(11, 2), slo={"ttft_ms": 1000, "tpot_ms": 1000}, metrics_model="delayed")
    res = run_bench(opts, work)
    run = res.runs[0]
    assert run.summary.completed == 10 and run.summary.goodput_rps > 0
    assert run.server is not None and (run.server.requests_success or 0) >= 10
    assert "queue_ms_mean" in run.server.model_fields_set
    assert res.provenance.url == server.grpc_url and len(run.records) == 11


def test_killed_server_keeps_partial_results(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    srv = S.start(repo, ports=S.Ports(S.free_port(), S.free_port(), S.free_port()), ready_timeout=120)
    killer = threading.Timer(1.5, lambda: srv.stop(2))
    killer.start()
    try:
        out = run_load("triton", srv.grpc_url, "delayed", _reqs(40), Load(concurrency=1), warmup=0, timeout=20)
    finally:
        killer.cancel()
        srv.stop()
    done = [r for r in out.records if r.ok]
    assert done, "some requests completed before the kill"
    assert out.interrupted and "server unreachable" in out.interrupted
    assert out.stop == "server-gone"
    assert len(out.records) < 40
    from toolchain.bench.run import assess

    s = aggregate(out.records, out.wall_s)
    # the run did not measure what was asked: non-zero exit, with the reason and the partial numbers kept
    assert assess(bench_result([{"label": "c=1", "summary": s}], stop=out.stop, interrupted=out.interrupted)) == (
        1,
        out.interrupted,
    )


def test_slo_search_finds_the_instance_count_on_cpu_triton(server: S.Server) -> None:
    """The delayed model has 4 instances, each serving one request at a time: the 5th concurrent request waits
    ~200 ms for an instance before its first token, so the knee of a 180 ms TTFT SLO is exactly 4."""
    from toolchain.bench.search import SloTargets, make_plan, run_search

    opts = BenchOptions(url=server.grpc_url, requests=12, warmup=0)
    work = BenchWorkload("delayed", _reqs(12))
    res = run_search(opts, work, make_plan("concurrency", limit=16), SloTargets(ttft_ms=180.0))
    s = res.search
    assert s is not None and s.status == "found" and s.knee is not None and s.knee.load == 4, s
    assert s.knee.first_failing_load == 5
