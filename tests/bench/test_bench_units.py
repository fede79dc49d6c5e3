"""Metric definitions, arrival processes, workloads, SSE client, report and diagnose rules."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.bench.workloads import bench_args
from tests.conftest import Cli
from toolchain.bench.loadgen import run_load
from toolchain.bench.metrics import RequestRecord, aggregate, summarize
from toolchain.bench.result import Load
from toolchain.bench.workload import Dist, PromptMaker, Request, arrivals, shared_prefix
from toolchain.diagnose.rules import Observations, diagnose


def test_percentiles_agree_with_numpy() -> None:
    rng = random.Random(3)
    data = [rng.lognormvariate(3, 1) for _ in range(999)]
    s = summarize(data)
    assert s is not None
    for p in (50, 90, 95, 99):
        assert s[f"p{p}"] == pytest.approx(float(np.percentile(data, p)))
    assert s["min"] == min(data) and s["max"] == max(data) and s["mean"] == pytest.approx(sum(data) / len(data))


def test_record_definitions() -> None:
    r = RequestRecord(0, 10, 5, sent=1.0, chunk_times=[1.2, 1.25, 1.3, 1.4], output_tokens=5)
    assert r.ttft == pytest.approx(0.2) and r.e2e == pytest.approx(0.4)
    assert r.tpot == pytest.approx(0.2 / 4)  # (E2E - TTFT) / (tokens - 1): server says 5 tokens in 4 chunks
    assert [round(x, 3) for x in r.chunk_gaps] == [0.05, 0.05, 0.1]
    one = RequestRecord(1, 10, 1, sent=0.0, chunk_times=[0.1], output_tokens=1)
    assert one.tpot is None
    agg = aggregate([r, one, RequestRecord(2, 1, 1, 0.0, error="boom")], wall_s=2.0, slo={"ttft_ms": 150})
    assert agg["completed"] == 2 and agg["errors"] == 1 and agg["goodput_rps"] == 0.5


def test_poisson_arrivals_have_the_right_mean_and_constant_is_exact() -> None:
    offs = arrivals(20000, 5.0, poisson=True, seed=7)
    gaps = np.diff(offs)
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() == pytest.approx(0.2, rel=0.05)  # exponential: std == mean
    assert arrivals(20000, 5.0, poisson=True, seed=7) == offs  # seeded
    const = np.diff(arrivals(100, 4.0, poisson=False, seed=0))
    assert np.allclose(const, 0.25)


def test_prompts_have_exactly_n_tokens(tiny_checkpoint: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    pm = PromptMaker(tok, 0)
    for n in (1, 7, 64, 200):
        assert pm.count(pm.make(n)) == n
    reqs = shared_prefix(tok, 40, 2, 32, 0.5, Dist.parse("8"), Dist.parse("4"), 1)
    shared = [r for r in reqs if r.shared_prefix]
    assert 10 < len(shared) < 30
    assert len({r.prompt[:20] for r in shared}) <= 2


def test_dist_parsing_and_bad_forms() -> None:
    from toolchain.errors import UserInputError

    rng = random.Random(0)
    assert Dist.parse("12").sample(rng) == 12
    assert 100 <= Dist.parse("uniform:100:200").sample(rng) <= 200
    with pytest.raises(UserInputError):
        Dist.parse("gamma:1")


class _SSE(BaseHTTPRequestHandler):
    def log_message(self, *a: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"data": []}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(0.06)
        for i in range(body["max_tokens"]):
            if i:
                time.sleep(0.02)
            self.wfile.write(f"data: {json.dumps({'choices': [{'text': f'w{i}'}]})}\n\n".encode())
            self.wfile.flush()
        usage = {"choices": [], "usage": {"completion_tokens": body["max_tokens"], "prompt_tokens": 3}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


def test_openai_sse_client_measures_ttft_and_reads_usage() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SSE)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        out = run_load("openai", url, "m", [Request("hi", 1, 5) for _ in range(4)], Load(concurrency=2), warmup=0)
    finally:
        httpd.shutdown()
    s = aggregate(out.records, out.wall_s)
    assert s["completed"] == 4
    assert all(r.output_tokens == 5 and r.token_source == "server" for r in out.records)
    # the server waits 60 ms before its first chunk and 20 ms between chunks: the clocks see at least that,
    # and the first token comes before the last (no upper bound a loaded machine could miss)
    assert 55 <= s["ttft_ms"]["p50"] < s["e2e_ms"]["p50"] and s["icl_ms"]["p50"] >= 15, s


@pytest.mark.parametrize(
    ("obs", "rule"),
    [
        (Observations(ttft_p50_ms=100, ttft_p99_ms=900, queue_p99_ms=50), "prefill-decode-interference"),
        (Observations(queue_p99_ms=450), "undersized"),
        (Observations(kv_usage_max=0.91), "kv-preemption-risk"),
        (Observations(gpu_util_mean=0.45), "gpu-underutilised"),
        (Observations(tpot_p50_ms=20, tpot_p99_ms=140), "prefill-spikes"),
        (Observations(prefix_caching_configured=True, reused_blocks=0), "prefix-cache-unused"),
    ],
)
def test_each_rule_fires(obs: Observations, rule: str) -> None:
    found = diagnose(obs)
    assert [f.rule for f in found] == [rule]
    assert found[0].evidence and found[0].action


def test_healthy_metrics_are_silent() -> None:
    healthy = Observations(
        ttft_p50_ms=100,
        ttft_p99_ms=250,
        tpot_p50_ms=20,
        tpot_p99_ms=30,
        queue_p99_ms=20,
        kv_usage_max=0.5,
        gpu_util_mean=0.85,
        prefix_caching_configured=True,
        reused_blocks=120,
    )
    assert diagnose(healthy) == []
    assert diagnose(Observations()) == []


@pytest.mark.slow
def test_report_and_diagnose_cli(cli: Cli, tmp_path: Path) -> None:
    recs = [
        RequestRecord(i, 8, 4, sent=0.0, chunk_times=[0.1 + i * 0.01, 0.12 + i * 0.01, 0.2 + i * 0.01], output_tokens=3)
        for i in range(20)
    ]
    recs.append(RequestRecord(20, 8, 4, sent=0.0, chunk_times=[3.0, 3.02], output_tokens=2))
    res = {
        "kind": "toolchain.bench-result",
        "schema": 1,
        "provenance": {"model": "ensemble", "url": "x"},
        "runs": [
            {
                "label": "concurrency=1",
                "load": {},
                "summary": aggregate(recs, 2.0),
                "server": {"queue_ms_mean": 5.0, "kv_usage_max": 0.3},
                "client": {},
                "prefix": None,
                "records": [r.to_json() for r in recs],
            }
        ],
        "interrupted": None,
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(res))
    r = cli("bench", "report", p, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "report.md").read_text().count("| concurrency=1 |") == 1
    assert (tmp_path / "rep" / "latency_cdf.png").stat().st_size > 1000
    r = cli("diagnose", "--bench", p, "--json")
    assert r.exit_code == 0, r.output
    rules = [f["rule"] for f in json.loads(r.stdout)["findings"]]
    assert "prefill-decode-interference" in rules
    r = cli("diagnose")
    assert r.exit_code == 2


def test_jsonl_dataset_workload(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from toolchain.bench.workload import dataset
    from toolchain.errors import UserInputError

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "The quick brown fox", "max_tokens": 7}\n\n{"prompt": "Hello"}\n')
    reqs = dataset(p, tok, Dist.parse("3"), 0, 10)
    assert [r.max_tokens for r in reqs] == [7, 3]
    assert reqs[0].prompt_tokens == len(tok.encode("The quick brown fox", add_special_tokens=False))
    p.write_text("not json\n")
    with pytest.raises(UserInputError, match=r"d\.jsonl:1"):
        dataset(p, tok, Dist.parse("3"), 0, 10)


def test_tokenizer_of_a_relocatable_repository(tmp_path: Path) -> None:
    from toolchain.bench.setup import find_tokenizer

    repo = tmp_path / "repo"
    (repo / "preprocessing").mkdir(parents=True)
    param = 'key: "tokenizer_dir" value { string_value: "../preprocessing/tokenizer" }'
    cfg = f'name: "preprocessing"\nparameters {{ {param} }}\n'
    (repo / "preprocessing" / "config.pbtxt").write_text(cfg)
    assert find_tokenizer(None, repo, None) == (repo / "preprocessing" / "tokenizer").resolve()


def _make(spec: Path | None, tok: Path, **over: object) -> Any:
    from toolchain.bench.options import BenchOptions
    from toolchain.bench.setup import make_config

    return make_config(BenchOptions(**bench_args(spec=spec, tokenizer=tok, **over)))[0]


def test_bench_spec_uses_the_specs_traffic_shape(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import yaml

    from tests.conftest import SPECS

    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(tiny_checkpoint)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(d))
    cfg = _make(spec, tiny_checkpoint)
    assert {r.max_tokens for r in cfg.requests} == {16} and {r.prompt_tokens for r in cfg.requests} == {32}
    assert cfg.slo == {"ttft_ms": 2000, "tpot_ms": 500}
    assert cfg.provenance["workload"] == {"input_tokens": "32", "output_tokens": "16", "shared_prefix": None}
    flags = _make(spec, tiny_checkpoint, output_tokens="5")  # a flag still wins over the spec
    assert {r.max_tokens for r in flags.requests} == {5}
    plain = _make(None, tiny_checkpoint)  # no spec: the documented defaults
    assert {r.max_tokens for r in plain.requests} == {32} and {r.prompt_tokens for r in plain.requests} == {64}


@pytest.mark.parametrize("body", [b"\x00\xff garbage", b"[1, 2]", b"{" * 5000, b'{"cell": 5}'])
def test_bench_refuses_a_damaged_repository_marker_in_one_line(cli: Cli, tmp_path: Path, body: bytes) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "toolchain-repo.json").write_bytes(body)
    r = cli("bench", "--repo", repo, "--url", "127.0.0.1:1", "--concurrency", "1", "--requests", "1")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("Error: ") and "toolchain-repo.json" in lines[-1] and "triton emit" in lines[-1]
    assert "Traceback" not in r.output


def test_bench_refuses_a_negative_warmup_in_one_line(cli: Cli) -> None:
    """--warmup -1 used to shrink the run silently (4 requests asked, 1 measured)."""
    r = cli("bench", "--url", "127.0.0.1:1", "--concurrency", "1", "--requests", "4", "--warmup", "-1")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("Error: ") and "--warmup must be 0 or more" in lines[-1] and "Traceback" not in r.output


@pytest.mark.parametrize(("over", "said"), [({"warmup": -2}, "--warmup"), ({"timeout": float("nan")}, "--timeout")])
def test_bench_options_refuse_what_the_cli_would(over: dict[str, Any], said: str) -> None:
    from tests.bench.workloads import bench_args
    from toolchain.bench.options import BenchOptions
    from toolchain.errors import UserInputError

    with pytest.raises(UserInputError, match=said):
        BenchOptions(**bench_args(concurrency="1", **over))
