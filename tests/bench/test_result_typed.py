"""The bench result travels as the model (``BenchResult``) from the run to every reader: the run returns it, report
renders it, diagnose reads its fields, the CLI prints it; only ``save`` and ``--json`` turn it into the document."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path

import toolchain.artifacts.bench_result as model
import toolchain.bench.result as bench_result
from tests.helpers import whole_bench_result
from toolchain.artifacts.bench_result import BenchResult
from toolchain.bench import report, run, search
from toolchain.cli import bench_cmd
from toolchain.diagnose import rules
from toolchain.pipeline import bench as pipeline_bench
from toolchain.pipeline import diagnose as pipeline_diagnose

BENCH = Path(rules.__file__).resolve().parents[1] / "bench"
# grep -c "dict\[str, Any\]" toolchain/bench/*.py: 76 lines before the result travelled as the model
MOST_UNTYPED = 47


def _hints(f: typing.Any) -> dict[str, typing.Any]:
    return typing.get_type_hints(f, localns=vars(model) | vars(report))  # names imported for type checking only


def test_the_run_returns_the_model_and_every_reader_takes_it() -> None:
    assert _hints(pipeline_bench.run_benchmark)["return"] is BenchResult
    assert _hints(run.run_bench)["return"] is BenchResult
    assert _hints(search.run_search)["return"] is BenchResult
    for f in (run.assess, search.assess_search, pipeline_bench.assess, run.save, run.without_records):
        assert _hints(f)["result"] is BenchResult, f
    assert _hints(bench_cmd.print_table)["res"] is BenchResult
    assert _hints(rules.observations_from)["result"] == BenchResult | None
    assert _hints(rules.bench_window)["result"] == BenchResult | None
    assert _hints(report.table_rows)["results"] == Sequence[report.Labelled]
    assert typing.get_type_hints(report.Labelled)["result"] is BenchResult


def test_the_model_lives_where_stages_meet_and_bench_still_names_it() -> None:
    """diagnose may not import bench (a stage imports no other): the model is in toolchain.artifacts."""
    assert BenchResult.__module__ == "toolchain.artifacts.bench_result"
    for name in bench_result.__all__:
        assert getattr(bench_result, name) is getattr(model, name), name


def test_readers_take_the_model_not_its_document(tmp_path: Path) -> None:
    """report and diagnose read a BenchResult; none turns it back into the document to index it."""
    res = BenchResult.model_validate(whole_bench_result())
    rows = report.table_rows([report.Labelled("r", res)])
    assert [(r["result"], r["load"], r["requests"], r["errors"]) for r in rows] == [("r", "concurrency=1", 4, 1)]
    files = report.render([res], tmp_path / "rep")
    assert "| concurrency=1 |" in files["markdown"].read_text()
    ttft = res.runs[0].summary.ttft_ms
    o = rules.observations_from(res, None, None)
    assert ttft is not None and o.ttft_p50_ms == ttft.p50 and o.ttft_p99_ms == ttft.p99
    for module in (report, rules, pipeline_diagnose, bench_cmd):
        assert ".document()" not in Path(module.__file__ or "").read_text(), module.__name__


def test_the_bench_package_holds_far_fewer_untyped_documents() -> None:
    count = sum(1 for p in BENCH.glob("*.py") for line in p.read_text().splitlines() if "dict[str, Any]" in line)
    assert count <= MOST_UNTYPED, f"{count} dict[str, Any] in toolchain/bench (at most {MOST_UNTYPED})"


def test_a_request_is_measured_in_one_declaration_and_saved_as_its_frozen_view() -> None:
    """RequestRecord (filled while the request runs) and Record (what is saved) are one concept: both take their
    measured fields from ``Measured``; the saved record adds only the latencies derived from them."""
    import dataclasses

    import pydantic
    import pytest

    from toolchain.artifacts.bench_result import Measured, Record
    from toolchain.bench.metrics import RequestRecord

    derived = {"ttft_ms", "e2e_ms", "tpot_ms"}
    assert RequestRecord.__mro__[1] is Measured and Record.__mro__[1] is Measured
    assert set(RequestRecord.model_fields) == set(Measured.model_fields)  # it declares no field of its own
    assert set(Record.model_fields) == set(Measured.model_fields) | derived
    assert not dataclasses.is_dataclass(RequestRecord)

    rec = RequestRecord(3, 8, 4, 1.0, chunk_times=[1.1, 1.2], output_tokens=2, perf={"kv_cache_reused_blocks": 5})
    rec.chunk_times.append(1.3)  # the hot path mutates it
    rec.ended, rec.scheduled, rec.shared_prefix = 1.3, 0.9, True
    saved = rec.record()
    for name in Measured.model_fields:
        assert getattr(saved, name) == getattr(rec, name), name
    assert (saved.ttft_ms, saved.e2e_ms) == pytest.approx((100.0, 300.0))
    with pytest.raises(pydantic.ValidationError):
        saved.error = "changed"  # type: ignore[misc]
