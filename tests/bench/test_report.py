"""Bench reports: HTML checked in a real headless Chromium, Markdown, CSV, plots, comparisons, failures."""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from toolchain.bench.metrics import RequestRecord, aggregate
from toolchain.bench.report import Labelled, load_results, parse_labelled, render
from toolchain.bench.result import KIND, BenchResult
from toolchain.errors import UserInputError

SLO: dict[str, float | None] = {"ttft_ms": 400.0, "tpot_ms": 40.0}


def _run(
    conc: int, ttft: float, gap: float, n: int = 12, errors: int = 0, warning: str | None = None
) -> dict[str, Any]:
    recs = [
        RequestRecord(i, 8, 5, 0.0, chunk_times=[ttft + i * 1e-3 + k * gap for k in range(5)], output_tokens=5)
        for i in range(n)
    ]
    recs += [RequestRecord(n + i, 8, 5, 0.0, error="HTTP 500: boom", error_kind="server") for i in range(errors)]
    client: dict[str, Any] = {"warnings": [warning]} if warning else {}
    return {
        "load": {"concurrency": conc},
        "label": f"concurrency={conc}",
        "summary": aggregate(recs, 1.0, SLO),
        "server": None,
        "client": client,
        "prefix": None,
        "records": [r.to_json() for r in recs],
        "interrupted": None,
    }


def _labelled(label: str, runs: list[dict[str, Any]]) -> Labelled:
    """Load points as a report takes them: a labelled result."""
    return Labelled(label, BenchResult.model_validate({"kind": KIND, "provenance": {}, "runs": runs}))


def _result(path: Path, runs: list[dict[str, Any]], **prov: Any) -> Path:
    doc = {
        "kind": "toolchain.bench-result",
        "schema": 1,
        "created": "2026-11-29T12:00:00+00:00",
        "provenance": {"model": "ensemble", "url": "127.0.0.1:8001", "protocol": "triton", **prov},
        "planner": {"tpot_floor_b1_ms": 5.5, "gpu": "H100-SXM"},
        "runs": runs,
        "interrupted": None,
        "stop": None,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def two_results(tmp_path: Path) -> list[Path]:
    a = _result(tmp_path / "a.json", [_run(c, 0.05 * c, 0.01) for c in (1, 2, 4)], cell="h100-sxm-b8")
    b = _result(
        tmp_path / "b.json",
        [_run(1, 0.04, 0.006), _run(2, 0.07, 0.007, errors=2), _run(4, 0.12, 0.009, warning="the client lagged")],
        cell="h100-sxm-b8",
    )
    return [a, b]


@pytest.mark.slow
def test_labelled_comparison_csv_and_plots(two_results: list[Path], tmp_path: Path) -> None:
    paths, labels = parse_labelled([f"fp8={two_results[0]}", f"int4={two_results[1]}"])
    files = render(load_results(paths, labels), tmp_path / "rep")
    assert {"latency_vs_load", "latency_cdf", "icl", "throughput_latency"} <= set(files)
    for name in ("latency_vs_load", "latency_cdf", "icl", "throughput_latency"):
        assert files[name].stat().st_size > 5000
    rows = list(csv.DictReader(files["csv"].read_text().splitlines()))
    assert [(r["result"], r["load"]) for r in rows] == [
        (lab, f"concurrency={c}") for lab in ("fp8", "int4") for c in (1, 2, 4)
    ]
    assert {"ttft_p90", "ttft_p95", "tpot_p90", "tpot_p95", "icl_p50"} <= set(rows[0])
    assert float(rows[0]["ttft_p50"]) == pytest.approx(55.5, abs=0.1)
    md = files["markdown"].read_text()
    assert "| result | load |" in md and "| int4 | concurrency=2 | 12 | 2 |" in md
    assert "2 of 14 requests failed (server: 2); first: HTTP 500: boom" in md
    assert "client warning:** concurrency=4: the client lagged" in md
    assert "Planner TPOT floor on H100-SXM (batch 1): 5.50 ms" in md and "TPOT SLO: 40 ms per request" in md
    assert "(AIPerf `inter_token_latency`)" in md and "(AIPerf `inter_chunk_latency`)" in md


def test_all_failed_run_says_so_instead_of_plotting(tmp_path: Path) -> None:
    p = _result(tmp_path / "dead.json", [_run(1, 0.1, 0.01, n=0, errors=4)])
    files = render(load_results([p]), tmp_path / "rep")
    assert set(files) == {"markdown", "html", "csv"}  # no empty plots
    md = files["markdown"].read_text()
    assert "No request completed" in md and "all 4 requests failed (server: 4)" in md


@pytest.mark.slow
def test_cpu_reference_floor_is_not_meaningful(tmp_path: Path) -> None:
    p = _result(tmp_path / "ref.json", [_run(1, 0.1, 0.01)], reference="the CPU reference model (not TensorRT-LLM)")
    md = render(load_results([p]), tmp_path / "rep")["markdown"].read_text()
    assert "not meaningful for this run: it served the CPU reference model" in md
    assert "× the floor" not in md and "x the floor" not in md


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    """Debian's chromium; installed with apt-get when absent and possible, else the test is skipped."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, timeout=900, env=env)
        found = shutil.which("chromium")
        if found:
            return found
    pytest.skip("chromium is not installed and cannot be installed here (needs root and apt-get with network)")


def _browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "chromium-profile"
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})


@pytest.mark.slow
def test_html_report_in_headless_chromium(two_results: list[Path], tmp_path: Path) -> None:
    paths, labels = parse_labelled([f"fp8={two_results[0]}", f"int4={two_results[1]}"])
    files = render(load_results(paths, labels), tmp_path / "rep")
    url = files["html"].resolve().as_uri()
    dom = _browser(["--dump-dom", url], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<title>Benchmark comparison: fp8, int4</title>" in html
    assert '<h1 id="title">Benchmark comparison: fp8, int4</h1>' in html
    assert "<td>int4</td><td>concurrency=4</td>" in html and "<td>fp8</td><td>concurrency=1</td>" in html
    assert "<th>TTFT p90</th><th>TTFT p95</th>" in html
    assert "the client lagged" in html and "What went wrong" in html
    for plot in ("latency_vs_load.png", "latency_cdf.png", "icl.png", "throughput_latency.png"):
        assert f'src="{plot}"' in html
    assert "<code>inter_chunk_latency</code>" in html and "Planner TPOT floor on H100-SXM" in html
    shot = tmp_path / "shot.png"
    r = _browser([f"--screenshot={shot}", "--window-size=1400,3000", url], tmp_path)
    assert r.returncode == 0 and shot.stat().st_size > 50_000, r.stderr[-2000:]  # text, tables and plots drawn


class _KeepFigures:
    """matplotlib.pyplot, except that close() keeps the figure so a test can read its axes."""

    def __init__(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.figures: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plt, name)

    def close(self, fig: Any) -> None:
        self.figures.append(fig)


def test_a_far_slo_does_not_flatten_the_data(tmp_path: Path) -> None:
    """A 2,000 ms TTFT SLO over 10-80 ms of data: the axis stays on the data, the SLO is written at its edge."""
    from toolchain.bench.report import _plot_latency_cdf, _plot_latency_vs_load, _series, table_rows

    runs = [_run(c, 0.01 * c, 0.01) for c in (1, 2, 4, 8)]  # TTFT 10-80 ms
    res = _labelled("r", runs)
    far = {"ttft_ms": 2000.0, "tpot_ms": 12.0}  # TPOT SLO near its data: still a line
    keep = _KeepFigures()
    _plot_latency_vs_load(keep, _series(table_rows([res])), far, None, "concurrency", ["C0"], tmp_path / "a.png")
    ttft_ax, tpot_ax = keep.figures[0].axes[:2]
    assert ttft_ax.get_ylim()[1] < 200  # the data (<= ~100 ms) fills the axis, not 1/25 of it
    assert any("SLO 2000 ms" in t.get_text() and "off the axis" in t.get_text() for t in ttft_ax.texts)
    assert any("SLO 12 ms" in line.get_label() for line in tpot_ax.get_lines())
    _plot_latency_cdf(keep, [("c=1", res.result.runs[0])], far, tmp_path / "b.png")
    assert keep.figures[1].axes[0].get_xlim()[1] < 200


@pytest.mark.slow
def test_slo_search_is_redrawn_from_the_cached_probes(tmp_path: Path) -> None:
    def probe(load: float, ok: bool, ttft: float) -> dict[str, Any]:
        return {
            "load": load,
            "label": f"concurrency={load:g}",
            "phase": "grow",
            "passed": ok,
            "reasons": [] if ok else [f"P99 TTFT {ttft} ms > 170 ms"],
            "ttft_ms_p99": ttft,
            "tpot_ms_p99": 30.0,
            "goodput_fraction": 1.0 if ok else 0.8,
            "output_token_throughput_tps": 30.0 * load,
            "completed": 12,
            "requests": 12,
            "request_throughput_rps": 3.0 * load,
            "goodput_rps": 3.0 * load,
        }

    probes = [probe(1, True, 30), probe(2, True, 35), probe(4, False, 320), probe(3, True, 40)]
    path = _result(tmp_path / "s.json", [_run(c, 0.03, 0.03) for c in (1, 2, 4, 3)])
    doc = json.loads(path.read_text())
    doc["search"] = {
        "mode": "concurrency",
        "status": "found",
        "slo": {"ttft_ms": 170.0, "tpot_ms": None, "goodput": None},
        "slo_text": "P99 TTFT <= 170 ms",
        "message": "knee at concurrency 3 (90.0 output tok/s)",
        "probes": probes,
        "curve": sorted(probes, key=lambda p: p["load"]),
        "knee": {**probes[3]},
    }
    path.write_text(json.dumps(doc))
    files = render(load_results([path]), tmp_path / "rep")
    assert files["slo_search"].stat().st_size > 10_000
    md = files["markdown"].read_text()
    assert "## SLO search: s (concurrency)" in md and "knee at concurrency 3" in md
    assert "missed: P99 TTFT 320 ms > 170 ms" in md
    assert "slo_search.png" in files["html"].read_text()
    doc["search"]["curve"][0]["load"] = "x"
    path.write_text(json.dumps(doc))
    with pytest.raises(
        UserInputError, match=r"s\.json is a damaged toolchain bench result: search\.probes\[0\]\.load is not a number"
    ):
        load_results([path])


@pytest.mark.slow
def test_a_minimal_search_section_renders(tmp_path: Path) -> None:
    """Only what the validator requires (load, verdict, label): the report still draws, never a KeyError."""
    path = _result(tmp_path / "m.json", [_run(1, 0.01, 0.01)])
    doc = json.loads(path.read_text())
    probes = [{"load": 1, "passed": True, "label": "c=1"}, {"load": 2, "passed": False, "label": "c=2"}]
    doc["search"] = {"mode": "concurrency", "probes": probes, "curve": probes, "knee": {"load": 1}}
    path.write_text(json.dumps(doc))
    files = render(load_results([path]), tmp_path / "rep")
    assert (
        files["slo_search"].is_file()
        and "| 2 | c=2 |  | - | - | 0.0% | 0.0 | missed:  |" in files["markdown"].read_text()
    )


def test_load_labels_do_not_overlap(tmp_path: Path) -> None:
    """Concurrency 1, 2, 4 ... 128 on one axis: every tick label stands apart (on a linear axis the low ones ran
    together as "1248163264128")."""
    from toolchain.bench.report import _plot_latency_vs_load, _series, table_rows

    runs = [_run(c, 0.01 * c, 0.01) for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    keep = _KeepFigures()
    _plot_latency_vs_load(keep, _series(table_rows([_labelled("r", runs)])), {}, None, "concurrency", ["C0"],
                          tmp_path / "a.png")  # fmt: skip
    fig = keep.figures[0]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in labels] == ["1", "2", "4", "8", "16", "32", "64", "128"]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 < right.x0, f"tick labels overlap: {left} {right}"
