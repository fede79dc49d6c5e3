"""--workers N (one clock, merged timestamps) and --trace replay, against test servers in their own process."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.bench.sse_server import sse_server_process
from tests.bench.workloads import bench_args, bench_cmd
from tests.conftest import Cli
from toolchain.bench.options import BenchOptions
from toolchain.bench.result import Load
from toolchain.bench.run import BenchWorkload, run_bench
from toolchain.bench.workers import split
from toolchain.bench.workload import Request
from toolchain.pipeline.bench import run_benchmark


def _cfg(url: str, load: dict[str, str], n: int, workers: int, tokens: int = 4) -> tuple[BenchOptions, BenchWorkload]:
    """``n`` requests (one of them the warm-up) to model "m" at ``url``, at ``load`` (--concurrency or --rate)."""
    reqs = [Request(f"p{i}", 2, tokens) for i in range(n)]
    opts = BenchOptions(url=url, protocol="openai", requests=n - 1, warmup=1, timeout=20.0, workers=workers, **load)
    return opts, BenchWorkload("m", reqs)


def test_split_keeps_the_single_process_schedule() -> None:
    todo = [Request(f"p{i}", 2, 4) for i in range(10)]
    parts = split(Load(concurrency=5), todo, 2, 0)
    assert [p[0].concurrency for p in parts] == [3, 2]
    assert sorted(j for p in parts for j in p[1].indices) == list(range(10))
    assert [len(p[2]) for p in parts] == [6, 4]  # the budget in proportion to the streams
    parts = split(Load(rate=10), todo, 3, 0)
    merged = sorted((o, j) for p in parts for j, o in zip(p[1].indices, p[1].offsets or [], strict=True))
    assert [j for _, j in merged] == list(range(10)) and merged[-1][0] == pytest.approx(0.9)
    assert len(split(Load(concurrency=1), todo, 4, 0)) == 1  # never more workers than streams


@pytest.mark.slow
def test_two_workers_merge_every_request_and_keep_ttft_accurate() -> None:
    with sse_server_process(first_s=0.03, gap_s=0.004) as (url, stats, _):
        res = run_bench(*_cfg(url, {"concurrency": "4"}, 33, workers=2))
        seen = stats()
    run = res.document()["runs"][0]
    s = run["summary"]
    assert s["requests"] == 32 and s["completed"] == 32, s["error_kinds"]
    measured = [r for r in run["records"] if not r["warmup"]]
    assert sorted(r["index"] for r in measured) == list(range(1, 33))  # global numbering, no duplicates
    workers = run["client"]["workers"]
    assert [w["requests"] for w in workers] == [16, 16]
    # one host-wide clock: each worker's measured offset is within its ping's half round trip, and nothing shifted
    assert all(abs(w["clock_offset_ms"]) <= w["clock_rtt_ms"] / 2 + 1e-3 for w in workers), workers
    assert all(w["clock_shifted_ms"] == 0 for w in workers)
    client = statistics.median(r["ttft_ms"] for r in measured)
    server = statistics.median(seen["server_ttft_s"]) * 1000
    # a few ms (benchmarks/loadgen_scaling.py measures it beside one worker); the bound is for a busy shared box
    assert 0 <= client - server < 25, f"client TTFT {client:.1f} ms vs the server's {server:.1f} ms"


@pytest.mark.slow
def test_two_workers_send_a_rate_on_one_clock() -> None:
    with sse_server_process(first_s=0.005, gap_s=0.001) as (url, stats, _):
        res = run_bench(*_cfg(url, {"rate": "40"}, 41, workers=2))
        arrivals = sorted(stats()["arrivals"])[-40:]  # the warm-ups come first
    due = sorted(r["scheduled"] for r in res.document()["runs"][0]["records"] if not r["warmup"])
    assert len(due) == 40 and due[-1] - due[0] == pytest.approx(39 / 40)
    late = [(a - d) * 1000 for a, d in zip(arrivals, due, strict=True)]
    # a few ms each (a new connection, a thread in the test server); a second clock would show as seconds
    assert 0 <= statistics.median(late) < 20 and max(late) < 80, late


def _trace(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


TRACE: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [7, 8]},
    {"timestamp": 120, "input_length": 12, "output_length": 3, "hash_ids": [7, 9]},
    {"timestamp": 150, "input_length": 9, "output_length": 3, "hash_ids": [5]},
    {"timestamp": 400, "input_length": 25, "output_length": 3, "hash_ids": [7, 8, 10]},
    {"timestamp": 430, "input_length": 6, "output_length": 2},
    {"timestamp": 800, "input_length": 10, "output_length": 3, "hash_ids": [5]},
]


@pytest.mark.slow
@pytest.mark.parametrize(("speed", "workers"), [("1", 1), ("2", 2)])
def test_trace_replays_on_time_with_shared_prefixes(
    tiny_checkpoint: Path, tmp_path: Path, speed: str, workers: int
) -> None:
    trace = _trace(tmp_path / "t.jsonl", TRACE)
    with sse_server_process(first_s=0.005, gap_s=0.001) as (url, stats, _):
        res = run_benchmark(
            BenchOptions(
                **bench_args(
                    url=url,
                    protocol="openai",
                    model="m",
                    tokenizer=tiny_checkpoint,
                    warmup=1,
                    trace=trace,
                    trace_speed=speed,
                    trace_block_tokens=8,
                    workers=workers,
                )
            )
        )
        seen = stats()
    run = res.document()["runs"][0]
    assert run["label"] == f"trace=t.jsonl x{speed}" and run["summary"]["completed"] == len(TRACE)
    arrivals = sorted(seen["arrivals"][workers:])  # after each worker's warm-up; the server's clock is ours
    due = sorted(r["scheduled"] for r in run["records"] if not r["warmup"])
    want = [r["timestamp"] / float(speed) for r in TRACE]
    assert [(d - due[0]) * 1000 for d in due] == pytest.approx(want, abs=1e-6)  # the schedule is the trace's
    late = [(a - d) * 1000 for a, d in zip(arrivals, due, strict=True)]
    # each arrival a few ms after its trace time (a new connection, a thread in the test server)
    assert 0 <= statistics.median(late) < 20 and max(late) < 80, late
    # the same leading hash id, the same leading block of text (8 tokens); another id, another text
    logged = sorted(zip(seen["arrivals"][workers:], seen["prompts"][workers:], strict=True))
    by_ts = [p for _, p in logged]
    tok = __import__("transformers").AutoTokenizer.from_pretrained(tiny_checkpoint)
    head = [tok.encode(p, add_special_tokens=False)[:8] for p in by_ts]
    assert head[0] == head[1] == head[3] and head[2] == head[5] and head[0] != head[2]
    assert tok.encode(by_ts[0], add_special_tokens=False)[:16] == tok.encode(by_ts[3], add_special_tokens=False)[:16]
    assert [len(tok.encode(p, add_special_tokens=False)) for p in by_ts] == [r["input_length"] for r in TRACE]
    prefix = run["prefix"]  # a request whose leading block was sent before counts as a prefix hit
    assert prefix["shared_requests"] == 3 and prefix["unique_requests"] == 3


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json\n", "t.jsonl:1: not JSON"),
        (b"[1, 2]\n", "t.jsonl:1: expected a JSON object"),
        (b'{"timestamp": -1, "input_length": 3, "output_length": 2}\n', "timestamp must be milliseconds >= 0"),
        (b'{"timestamp": "soon", "input_length": 3, "output_length": 2}\n', "timestamp must be milliseconds"),
        (b'{"timestamp": 0, "input_length": 3}\n', "no 'output_length'"),
        (b'{"timestamp": 0, "input_length": 0, "output_length": 2}\n', "input_length must be a whole number"),
        (b'{"timestamp": 0, "input_length": true, "output_length": 2}\n', "input_length must be a whole number"),
        (b'{"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": "ab"}\n', "hash_ids must be a list"),
        (b'{"timestamp": 0, "text_input": 5, "output_length": 2}\n', "text_input must be a string"),
        (b"\n\n", "holds no requests"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bad_traces_are_one_line_errors(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "t.jsonl").write_bytes(content)
    r = cli(
        "bench",
        "--url",
        "http://127.0.0.1:9",
        "--protocol",
        "openai",
        "--tokenizer",
        tiny_checkpoint,
        "--trace",
        tmp_path / "t.jsonl",
    )
    assert r.exit_code == 2, r.output
    err = _error_lines(r.stderr)
    assert len(err) == 1 and err[0].startswith("Error: ") and why in err[0], r.stderr


def _error_lines(stderr: str) -> list[str]:
    """stderr less the timestamped narration ("[   0.0s] preparing the load ...") that may precede the error."""
    return [ln for ln in stderr.strip().splitlines() if not re.match(r"\[\s*[\d.]+s\] ", ln)]


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--workers", "0"], "--workers must be from 1 to 256"),
        (["--trace-speed", "2"], "--trace-speed scales a --trace"),
        (["--trace", "T", "--concurrency", "2"], "--concurrency cannot be combined with it"),
        (["--trace", "T", "--trace-speed", "0"], "must be positive"),
        (["--trace", "T", "--trace-speed", "fast"], "cannot read the list"),
        (["--trace", "T", "--trace-block-tokens", "0"], "--trace-block-tokens must be at least 1"),
        (["--trace", "missing.jsonl"], "cannot read the trace"),
        (["--slo-search", "latency"], "--slo-search takes concurrency or rate"),
        (["--slo-search", "concurrency", "--rate", "2"], "--slo-search chooses its own load points"),
        (["--slo-start", "4"], "shape an --slo-search"),
        (["--slo-search", "concurrency", "--slo-start", "2.5"], "whole number"),
        (["--slo-search", "rate", "--slo-max", "-1"], "--slo-max must be a positive number"),
        (["--slo-search", "concurrency"], "no SLO to search against"),
        (["--slo-goodput", "2"], "--slo-goodput is a fraction"),
        (["--slo-search", "concurrency", "--slo-ttft-ms", "nan"], "--slo-ttft-ms must be a positive number"),
    ],
)
def test_bad_new_flags_are_one_line_errors(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, flags: list[str], why: str
) -> None:
    _trace(tmp_path / "T", TRACE[:1])
    flags = [str(tmp_path / "T") if f == "T" else f for f in flags]
    r = cli("bench", "--url", "http://127.0.0.1:9", "--protocol", "openai", "--tokenizer", tiny_checkpoint, *flags)
    assert r.exit_code == 2, r.output
    err = _error_lines(r.stderr)
    assert len(err) == 1 and err[0].startswith("Error: ") and why in err[0], r.stderr
    assert "Traceback" not in r.output


@pytest.mark.slow
def test_ctrl_c_with_workers_keeps_every_worker_s_results(
    tiny_checkpoint: Path, tmp_path: Path, valid_result: Callable[[Any], None]
) -> None:
    import os
    import signal
    import subprocess

    from tests.conftest import REPO

    out = tmp_path / "r.json"
    with sse_server_process(first_s=0.05, gap_s=0.2) as (url, _, _):
        cmd = bench_cmd(url, tiny_checkpoint, out, "--requests", "40", "--concurrency", "4", "--workers", "2")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stderr is not None
        for line in proc.stderr:  # narration: the workers are sending
            if "requests:" in line:
                break
        time.sleep(2.5)
        proc.send_signal(signal.SIGINT)  # the parent only, as `kill -INT` does: it passes it to its workers
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    saved = json.loads(out.read_text())
    valid_result(saved)  # against docs/bench-result.schema.json (tests/bench/conftest.py)
    s = saved["runs"][0]["summary"]
    assert saved["stop"] == "interrupted" and s["completed"] >= 2 and s["cancelled"] >= 1, s
    assert len(saved["runs"][0]["client"]["workers"]) == 2  # both workers' requests came back
    assert "Traceback" not in stderr
