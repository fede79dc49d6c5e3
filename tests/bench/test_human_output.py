"""What a person reads after a benchmark (issue 49): `diagnose` printed the server's figures as a raw dict
("compute_infer_ms_mean": 40.998599999999996, "kv_usage_mean": 4.107338444687842e-05) and report.md showed Python
reprs ('shared_prefix': None) and "No SLOs given" although `bench --repo` had the spec's repository. Human output
has units, rounding and the spec's SLOs; --json keeps its fields."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_diagnose_window import _result
from tests.bench.test_report import SLO, _run
from tests.bench.workloads import bench_args
from tests.conftest import REPO, Cli, write_tiny_spec
from tests.terminal.pty_harness import run_on_pty
from toolchain.diagnose.summary import server_lines

SERVER = {
    "model": "tensorrt_llm",
    "requests_success": 12.0,
    "requests_failure": 0.0,
    "queue_ms_mean": 0.123456,
    "compute_infer_ms_mean": 40.998599999999996,
    "queue_ms_p99": 0.5,
    "kv_usage_max": 0.000125,
    "kv_usage_mean": 4.107338444687842e-05,
    "kv_reused_blocks": 0.0,
    "gpu_util_max": 0.61,
    "gpu_util_mean": 0.4512,
}
RAW = re.compile(r"\d\.\d{5,}|e-0\d|\{|'")  # a float's full repr, exponent notation, a dict or a Python repr


def test_server_figures_have_units_and_rounding() -> None:
    text = "\n".join(server_lines(SERVER))
    assert "server (tensorrt_llm): 12 requests succeeded, 0 failed" in text, text
    assert "queue mean 0.12 ms, p99 0.50 ms" in text and "compute mean 41.00 ms per request" in text, text
    assert "KV cache used mean 0.0041%, max 0.013%" in text and "0 blocks reused" in text, text
    assert "GPU utilisation mean 45%, max 61%" in text, text
    assert not RAW.search(text), text


def test_an_unknown_field_is_listed_rounded() -> None:
    assert server_lines({"new_metric": 1 / 3}) == ["server", "  new_metric 0.333"]


def _bench_file(tmp_path: Path) -> Path:
    doc = _result(SERVER, shared=None)
    doc["runs"][0]["summary"]["slo"] = SLO  # the spec's SLOs, as bench --spec (or --repo) records them
    p = tmp_path / "run.json"
    p.write_text(json.dumps(doc))
    return p


def test_diagnose_prints_the_figures_for_a_person_and_keeps_json_fields(cli: Cli, tmp_path: Path) -> None:
    p = _bench_file(tmp_path)
    r = cli("diagnose", "--bench", p)
    assert r.exit_code == 0, r.output
    assert "compute mean 41.00 ms per request" in r.stderr and "KV cache used mean 0.0041%" in r.stderr, r.stderr
    assert not RAW.search(r.stderr), r.stderr
    assert "SLOs the benchmark measured against: TTFT 400 ms, TPOT 40 ms per request" in r.stderr, r.stderr
    r = cli("diagnose", "--bench", p, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["server"] == SERVER  # the machine's document: every field, full precision


def test_diagnose_on_a_terminal_at_80_columns(tmp_path: Path) -> None:
    p = _bench_file(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCHAIN_")}
    env |= {"PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "80", "HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "toolchain.cli.main", "diagnose", "--bench", str(p)]
    r = run_on_pty(argv, env=env, timeout=120, cols=80)
    assert r.returncode == 0, r.describe()
    assert "server (tensorrt_llm): 12 requests succeeded, 0 failed" in r.text, r.describe()
    assert not RAW.search(r.text) and "Traceback" not in r.text, r.describe()


def test_report_md_has_no_python_reprs_and_names_the_slos(tmp_path: Path) -> None:
    from toolchain.bench.report import load_results, render

    doc: dict[str, Any] = {
        "kind": "toolchain.bench-result",
        "schema": 1,
        "created": "2026-11-29T12:00:00+00:00",
        "provenance": {
            "model": "ensemble",
            "url": "127.0.0.1:8001",
            "protocol": "triton",
            "workload": {"input_tokens": "32", "output_tokens": "16", "shared_prefix": None},
        },
        "runs": [_run(1, 0.1, 0.01, n=0, errors=2)],  # nothing to plot: fast
        "interrupted": None,
        "stop": None,
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    md = render(load_results([p]), tmp_path / "rep")["markdown"].read_text()
    assert "- workload: `input_tokens 32, output_tokens 16`" in md, md
    assert "None" not in md and "{'" not in md, md
    assert f"- TTFT SLO: {SLO['ttft_ms']:g} ms per request" in md and "No SLOs given" not in md, md


def test_bench_with_an_emitted_repository_measures_against_its_specs_slos(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The repository `deploy` (and `triton emit`) writes records the spec's SLOs: `bench --repo` without --spec
    measures goodput against them, so the report states them."""
    from toolchain.bench.options import BenchOptions
    from toolchain.bench.setup import make_config

    spec = write_tiny_spec(tmp_path / "tiny.yaml", tiny_checkpoint)
    r = cli("deploy", spec, "--registry", "s3://b/p", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    repo = tmp_path / "o" / "image" / "model_repository"
    cfg, _ = make_config(BenchOptions(**bench_args(repo=repo)))
    assert cfg.slo == {"ttft_ms": 2000.0, "tpot_ms": 500.0}  # engine_specs/tiny.yaml's slo


@pytest.mark.parametrize("bad", [{"ttft_ms": "fast"}, {"tpot_ms": -1}, {"ttft_ms": True}])
def test_a_damaged_slo_in_the_repository_marker_is_a_one_line_error(bad: dict[str, Any], tmp_path: Path) -> None:
    from toolchain.bench.setup import _repo_slo
    from toolchain.errors import UserInputError

    marker = tmp_path / "toolchain-repo.json"
    marker.write_text(json.dumps({"spec": "tiny", "slo": bad}))
    with pytest.raises(UserInputError, match="slo"):
        _repo_slo(marker)
    marker.write_text(json.dumps({"spec": "tiny"}))  # emitted before the marker recorded SLOs: none, no error
    assert _repo_slo(marker) == {}
