"""`toolchain plan SPEC --measured RESULT`: the fleet from a measured knee, and what it must refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli, write_tiny_spec
from toolchain.bench.metrics import RequestRecord, aggregate

KNEE_TOK_S = 8.0


def _result(path: Path, **prov: Any) -> Path:
    recs = [
        RequestRecord(i, 32, 16, 0.0, chunk_times=[0.1 + k * 0.01 for k in range(16)], output_tokens=16)
        for i in range(4)
    ]
    run = {"load": {"concurrency": 2}, "label": "concurrency=2", "summary": aggregate(recs, 8.0), "records": []}
    knee = {
        "load": 2.0,
        "label": "concurrency=2",
        "phase": "bisect",
        "passed": True,
        "reasons": [],
        "ttft_ms_p99": 100.0,
        "tpot_ms_p99": 10.0,
        "goodput_fraction": 1.0,
        "completed": 4,
        "requests": 4,
        "output_token_throughput_tps": KNEE_TOK_S,
        "request_throughput_rps": 0.5,
        "goodput_rps": 0.5,
    }
    fail = {**knee, "load": 3.0, "label": "concurrency=3", "passed": False, "reasons": ["P99 TTFT 3000 ms > 2000 ms"]}
    doc = {
        "kind": "toolchain.bench-result",
        "provenance": {
            "model": "ensemble",
            "url": "127.0.0.1:8001",
            "workload": {"input_tokens": "32", "output_tokens": "16"},
            **prov,
        },
        "runs": [run],
        "search": {
            "mode": "concurrency",
            "status": "found",
            "slo": {"ttft_ms": 2000.0, "tpot_ms": 500.0, "goodput": None},
            "slo_text": "P99 TTFT <= 2000 ms, P99 TPOT <= 500 ms",
            "message": "knee at concurrency 2",
            "probes": [knee, fail],
            "curve": [knee, fail],
            "knee": {**knee, "first_failing_load": 3.0},
        },
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def tiny(tiny_checkpoint: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    spec = write_tiny_spec(tmp_path / "tiny.yaml", tiny_checkpoint)
    cell = expand(load_spec(spec))[0]
    art = for_cell(cell)
    return spec, {"spec": cell.spec.name, "cell": cell.id, "engine_key": art.engine_key, "gpu": cell.gpu.name}


@pytest.mark.slow
def test_fleet_from_the_knee_beside_the_roofline(cli: Cli, tiny: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    spec, ident = tiny
    r = cli("plan", spec, "--measured", _result(tmp_path / "r.json", **ident), "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    # tiny.yaml traffic: 1 req/s × 16 output tokens = 16 tok/s at peak; utilization 0.75, headroom 1.2 (defaults)
    raw = 1 * 16 / KNEE_TOK_S
    assert m["measured_fleet"]["raw_instances"] == pytest.approx(raw)
    assert m["measured_fleet"]["total_gpus"] == math.ceil(raw * 1 / 0.75 * 1.2) == 4
    roof = m["roofline_fleet"]
    assert roof is not None and m["ratio_tok_s_per_instance"] == pytest.approx(KNEE_TOK_S / roof["tok_s_per_instance"])
    assert m["engine_key_checked"] is True and m["notes"] == []
    r = cli("plan", spec, "--measured", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert "measured (SLO knee)" in r.stdout and "roofline" in r.stdout and "8.0 at concurrency=2" in r.stdout
    assert "= 4 GPUs" in r.stderr


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"reference": "CPU reference model (PyTorch + transformers), not TensorRT-LLM"},
            "served by the CPU reference",
        ),
        ({"cell": "h200-sxm-b8-s256-i128-tp1"}, "which is not a cell of tiny"),
        ({"gpu": "H200-SXM"}, "it measured on H200-SXM"),
        ({"engine_key": "0" * 64}, "its engine key 000000000000 is not this cell's"),
        ({"spec": "llama"}, "it measured spec 'llama'"),
    ],
)
def test_a_measurement_of_another_engine_is_refused(
    cli: Cli, tiny: tuple[Path, dict[str, Any]], tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    spec, ident = tiny
    r = cli("plan", spec, "--measured", _result(tmp_path / "r.json", **{**ident, **change}))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and why in lines[0], r.stderr
    if "reference" in change:  # it says what it would do, and why that is no answer
        assert "it would size 4 GPUs from 8.0 tok/s per instance" in lines[0]
        assert "says nothing about this engine on this GPU" in lines[0]
    assert "Traceback" not in r.output


def test_a_result_without_a_search_or_knee_is_refused(
    cli: Cli, tiny: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    spec, ident = tiny
    p = _result(tmp_path / "r.json", **ident)
    doc = json.loads(p.read_text())
    no_knee = {**doc, "search": {**doc["search"], "knee": None, "status": "unmet", "message": "not met at 1"}}
    (tmp_path / "k.json").write_text(json.dumps(no_knee))
    del doc["search"]
    p.write_text(json.dumps(doc))
    for f, why in ((p, "holds fixed load points, not an SLO search"), (tmp_path / "k.json", "found no load that met")):
        r = cli("plan", spec, "--measured", f)
        assert r.exit_code == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    (tmp_path / "g.json").write_bytes(b"\x00garbage")
    r = cli("plan", spec, "--measured", tmp_path / "g.json", "--json")
    assert r.exit_code == 2 and "not JSON" in r.stderr
    r = cli("plan", spec, "--measured", tmp_path / "missing.json")
    assert r.exit_code == 2 and "cannot read bench result" in r.stderr


@pytest.mark.slow
def test_a_search_that_hit_its_bound_is_no_knee(cli: Cli, tiny: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """The SLOs held at the bound: the table, the notes and the plot say there is no knee within the bounds."""
    from toolchain.bench.report import knee_caption

    spec, ident = tiny
    path = _result(tmp_path / "r.json", **ident)
    doc = json.loads(path.read_text())
    doc["search"]["status"] = "bound"
    doc["search"]["knee"]["first_failing_load"] = None
    path.write_text(json.dumps(doc))
    r = cli("plan", spec, "--measured", path)
    assert r.exit_code == 0, r.output
    assert "measured (no knee)" in r.output and "(search bound)" in r.output
    assert "note: no knee within the bounds" in r.output
    assert knee_caption("bound", 1024, 615.6).startswith("no knee within the bounds")
    assert knee_caption("found", 16, 615.6) == "knee 16: 616 tok/s"


def test_a_refused_bound_search_says_the_figure_is_no_knee(
    cli: Cli, tiny: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The refusal quotes what the measurement would size; at the bound that figure is no knee, and it says so
    (before: "it would size 4 GPUs from 8.0 tok/s per instance at concurrency=2", as if a knee was found)."""
    spec, ident = tiny
    path = _result(tmp_path / "r.json", **ident, reference="toolchain stand-in server (3 decode slots, no model)")
    doc = json.loads(path.read_text())
    doc["search"]["status"] = "bound"
    doc["search"]["knee"]["first_failing_load"] = None
    path.write_text(json.dumps(doc))
    r = cli("plan", spec, "--measured", path)
    assert r.exit_code == 2, r.output
    assert "it was served by the toolchain stand-in server" in r.stderr
    assert "8.0 tok/s per instance at concurrency=2, where the search hit its bound (no knee within the bounds" in (
        r.stderr
    )
    doc["search"]["status"] = "found"
    path.write_text(json.dumps(doc))
    r = cli("plan", spec, "--measured", path)
    assert r.exit_code == 2 and "at concurrency=2 (roofline:" in r.stderr and "bound" not in r.stderr


def _search_result(path: Path, probes: list[tuple[int, float, float, float, bool]], **prov: Any) -> Path:
    """A concurrency search's result whose probes are (load, TTFT p99 ms, TPOT p99 ms, tok/s, passed)."""
    base = json.loads(_result(path, **prov).read_text())
    rows: list[dict[str, Any]] = [
        {
            "load": float(c), "label": f"concurrency={c}", "phase": "grow", "passed": ok, "reasons": [],
            "ttft_ms_p99": ttft, "tpot_ms_p99": tpot, "completed": 64, "requests": 64,
            "output_token_throughput_tps": toks, "request_throughput_rps": toks / 256,
        }
        for c, ttft, tpot, toks, ok in probes
    ]  # fmt: skip
    knee = max((r for r in rows if r["passed"]), key=lambda r: float(r["load"]))
    base["search"].update(probes=rows, curve=rows, knee={**knee, "first_failing_load": None}, status="found")
    path.write_text(json.dumps(base))
    return path


@pytest.mark.slow
def test_calibration_is_the_estimate_over_the_measurement_at_every_probe(cli: Cli, tmp_path: Path) -> None:
    """The 8B FP8 spec's H100 cell: AIConfigurator's figures at each probe's batch (recorded from its own CLI in
    tests/reference/aiconfigurator_0.12.0.json at the spec's 1024/256 traffic) over what the probe measured."""
    from tests.conftest import REPO, SPECS

    ref = json.loads((REPO / "tests" / "reference" / "aiconfigurator_0.12.0.json").read_text())

    def aic(batch: int) -> dict[str, Any]:
        want = ("llama-3.1-8b", "h100_sxm", "fp8", 1, batch)
        return next(r for r in ref["estimates"] if (r["model"], r["system"], r["weights"], r["tp"], r["batch"]) == want)

    spec = SPECS / "llama-3.1-8b-fp8.yaml"
    ident = {"spec": "llama-3.1-8b-instruct-fp8", "cell": "h100-sxm-b64-s4096-i2048-tp1", "gpu": "H100-SXM"}
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    ident["engine_key"] = str(for_cell(expand(load_spec(SPECS / "llama-3.1-8b-fp8.yaml"))[0]).engine_key)
    measured = {1: (40.0, 6.5, 150.0), 64: (120.0, 14.0, 4000.0)}
    res = _search_result(tmp_path / "k.json", [(c, *m, True) for c, m in measured.items()], **ident)
    r = cli("plan", spec, "--measured", res, "--json")
    assert r.exit_code == 0, r.output
    cal = json.loads(r.stdout)["calibration"]
    assert (
        cal["estimator"] == "aiconfigurator 0.12.0"
        and cal["system"] == "h100_sxm"
        and (cal["isl"], cal["osl"])
        == (
            1024,
            256,
        )
    )
    assert [row["load"] for row in cal["rows"]] == [1.0, 64.0]
    for row in cal["rows"]:
        want, (ttft, tpot, toks) = aic(int(row["load"])), measured[int(row["load"])]
        assert math.isclose(row["ttft_ratio"], want["ttft_ms"] / ttft, rel_tol=2e-3)
        assert math.isclose(row["tpot_ratio"], want["tpot_ms"] / tpot, rel_tol=2e-3)
        assert math.isclose(
            row["tok_s_ratio"], want["tok_s_per_gpu"] / toks, rel_tol=2e-3
        )  # TP1: per GPU = per instance
    table = cli("plan", spec, "--measured", res)
    assert table.exit_code == 0 and "estimate ÷ measured per probe" in table.output, table.output
    floor = cli("plan", spec, "--measured", res, "--estimator", "floor", "--json")
    assert floor.exit_code == 0 and "calibration" not in json.loads(floor.stdout)


def test_a_rate_search_says_why_it_has_no_calibration(cli: Cli, tmp_path: Path) -> None:
    from tests.conftest import SPECS

    ident = {"spec": "llama-3.1-8b-instruct-fp8", "cell": "h100-sxm-b64-s4096-i2048-tp1", "gpu": "H100-SXM"}
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    ident["engine_key"] = str(for_cell(expand(load_spec(SPECS / "llama-3.1-8b-fp8.yaml"))[0]).engine_key)
    res = _search_result(tmp_path / "k.json", [(2, 40.0, 6.5, 300.0, True)], **ident)
    doc = json.loads(res.read_text())
    doc["search"]["mode"] = "rate"
    res.write_text(json.dumps(doc))
    r = cli("plan", SPECS / "llama-3.1-8b-fp8.yaml", "--measured", res, "--json")
    assert r.exit_code == 0, r.output
    assert "rate search" in json.loads(r.stdout)["calibration"]["none"]
