"""The bench result model (toolchain/bench/result.py) and its published JSON Schema (docs/bench-result.schema.json).

The schema is checked by the consumers' validators: ``check-jsonschema`` (its metaschema check, and a saved result
against the schema file) and the ``jsonschema`` library (tests/bench/conftest.py holds every result the bench tests
write to it).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Cli
from tests.validators import must_pass, tool
from toolchain.bench import prom, search
from toolchain.bench.loadgen import RunOutcome
from toolchain.bench.metrics import RequestRecord
from toolchain.bench.options import BenchOptions
from toolchain.bench.result import RESULT_SCHEMA, BenchResult, Load, LoadPoint, parse_result, read_result
from toolchain.bench.run import BenchWorkload, _load_point, _result_document, _server_window, save
from toolchain.errors import UserInputError

SCHEMA = REPO / "docs" / "bench-result.schema.json"


def _records() -> list[RequestRecord]:
    """Warm-up, shared-prefix and unique successes with draft counters, a failure and a cancelled request."""
    recs = [RequestRecord(0, 8, 4, 0.0, chunk_times=[0.05, 0.06], output_tokens=2, warmup=True)]
    for i in range(1, 5):
        recs.append(
            RequestRecord(
                i,
                8,
                4,
                0.0,
                chunk_times=[0.04 + 0.01 * k for k in range(4)],
                output_tokens=4,
                shared_prefix=i % 2 == 0,
                scheduled=0.0,
                perf={"kv_cache_reused_blocks": 1, "total_draft_tokens": 3, "total_accepted_draft_tokens": 2},
            )
        )
    recs.append(RequestRecord(5, 8, 4, 0.0, error="HTTP 500: boom", error_kind="server"))
    recs.append(RequestRecord(6, 8, 4, 0.0, error="cancelled", error_kind="cancelled"))
    return recs


def _cfg() -> tuple[BenchOptions, BenchWorkload]:
    opts = BenchOptions(url="127.0.0.1:1", concurrency="2", warmup=1)
    work = BenchWorkload(
        "ensemble",
        [],
        slo={"ttft_ms": 100.0, "tpot_ms": 20.0},
        provenance={"spec": "tiny", "cell": "cpu-b4", "gpu": "H100-SXM", "workload": {"input_tokens": "8"}},
    )
    return opts, work


def _outcome() -> RunOutcome:
    out = RunOutcome(_records(), 1.0, client_cpu_s=0.2, lag_s=[0.001, 0.2], loop_lag_s=[0.001, 0.03])
    out.workers = [{"worker": 0, "requests": 6, "cpu_s": 0.2, "wall_s": 1.0}]
    return out


def _written(server: dict[str, Any] | None = None) -> BenchResult:
    """A whole result as the writer builds it: every section filled (server, client, prefix, speculative)."""
    opts, work = _cfg()
    window = server if server is not None else {"model": "tensorrt_llm", "requests_success": 4.0, "queue_ms_p99": 3.0}
    run = _load_point(work, Load(concurrency=2), _outcome(), window, 0.0)
    return _result_document(opts, work, [run], None, None)


def test_the_committed_schema_is_what_bench_schema_prints(cli: Cli) -> None:
    """A field changed in the model without regenerating docs/bench-result.schema.json fails here."""
    r = cli("bench", "schema")
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout)
    assert printed == json.loads(SCHEMA.read_text()), (
        "docs/bench-result.schema.json is stale: run `toolchain bench schema > docs/bench-result.schema.json`, and "
        "raise RESULT_SCHEMA in toolchain/bench/result.py unless the change only adds an optional field"
    )
    assert printed["properties"]["schema"]["default"] == RESULT_SCHEMA
    assert printed["additionalProperties"] is False  # exact: a writer's undeclared key fails the schema


@pytest.mark.slow
def test_check_jsonschema_accepts_the_schema_and_a_saved_result(tmp_path: Path) -> None:
    must_pass([tool("check-jsonschema"), "--check-metaschema", str(SCHEMA)], what="check-jsonschema metaschema")
    path = tmp_path / "r.json"
    save(_written(), path)
    must_pass([tool("check-jsonschema"), "--schemafile", str(SCHEMA), str(path)], what="check-jsonschema on r.json")


def test_a_written_result_reads_back_whole(tmp_path: Path, valid_result: Any) -> None:
    path = tmp_path / "r.json"
    doc = _written()
    save(doc, path)
    saved = json.loads(path.read_text())
    valid_result(saved)
    run = saved["runs"][0]
    assert run["speculative"]["draft_tokens"] == 12 and run["prefix"]["shared_requests"] == 2
    assert run["client"]["workers"][0]["requests"] == 6 and run["summary"]["cancelled"] == 1
    back = read_result(path)
    assert back.document() == saved
    assert back.runs[0].summary.error_kinds == {"server": 1} and back.provenance.workload.input_tokens == "8"


def test_a_search_result_validates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, valid_result: Any) -> None:
    """The SLO search's section, built by the real search loop over probes measured by a stand-in."""

    def measure(
        opts: BenchOptions, work: BenchWorkload, load: Load, progress: Any, *, first: bool
    ) -> tuple[LoadPoint, None, None]:
        return _load_point(work, load, _outcome(), None, 0.0), None, None

    monkeypatch.setattr(search, "measure_point", measure)
    plan = search.make_plan("concurrency", limit=4)
    res = search.run_search(*_cfg(), plan, search.SloTargets(ttft_ms=1000.0))
    save(res, tmp_path / "s.json")
    saved = json.loads((tmp_path / "s.json").read_text())
    valid_result(saved)
    assert saved["search"]["status"] == "bound" and saved["search"]["knee"]["load"] == 4
    assert read_result(tmp_path / "s.json").search is not None


@pytest.mark.slow
def test_a_result_whose_closing_scrape_failed_is_read(cli: Cli, tmp_path: Path) -> None:
    """The server went away before the last scrape: the window says why (before: every reader refused the file,
    'runs[0].server is not a table of numbers')."""
    path = tmp_path / "r.json"
    save(_written(server={"error": "cannot scrape metrics at http://127.0.0.1:1/metrics: refused"}), path)
    assert read_result(path).runs[0].server is not None
    r = cli("bench", "report", path, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    r = cli("diagnose", "--bench", path)
    assert r.exit_code == 0, r.output


def test_a_nan_server_figure_is_left_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Prometheus summary with no observation reads NaN; the result leaves the figure out (before: the file held
    NaN, which is not JSON, and every reader refused it)."""
    before = prom.parse('nv_inference_request_success{model="m"} 0\n')
    after = prom.parse(
        'nv_inference_request_success{model="m"} 4\nnv_inference_queue_summary_us{model="m",quantile="0.99"} NaN\n'
    )
    monkeypatch.setattr(prom, "scrape", lambda url, timeout=5.0: after)
    opts, work = _cfg()
    opts = opts.model_copy(update={"metrics_url": "http://127.0.0.1:1/metrics"})
    window = _server_window(opts, replace(work, metrics_model="m"), before, [])
    assert window is not None and "queue_ms_p99" not in window and window["requests_success"] == 4
    path = tmp_path / "r.json"
    save(_written(server=window), path)
    assert "NaN" not in path.read_text()
    assert read_result(path).runs[0].server is not None


def test_the_writer_refuses_a_document_the_model_does_not_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer's mistake (here a count as text) is caught when the load point is built (so before any file is
    written: ``save`` takes the built model), naming the field."""
    from toolchain.bench.metrics import aggregate

    _, work = _cfg()
    monkeypatch.setattr("toolchain.bench.run.aggregate", lambda *a: aggregate(*a) | {"completed": "4"})
    with pytest.raises(ValueError, match=r"not schema 1: summary\.completed is not a whole number"):
        _load_point(work, Load(concurrency=2), _outcome(), None, 0.0)


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        (("runs", 0, "summary", "requests"), "7", 'runs[0].summary.requests is not a whole number ("7")'),
        (("runs", 0, "summary", "goodput_rps"), True, "runs[0].summary.goodput_rps is not a number (true)"),
        (("runs", 0, "records", 1, "ttft_ms"), "fast", 'runs[0].records[1].ttft_ms is not a number ("fast")'),
        (("runs", 0, "server"), [1], "runs[0].server is not an object (list)"),
        (("provenance", "cell"), 3, "provenance.cell is not text (3)"),
        (("runs",), [], "runs is empty"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_file_and_field(
    cli: Cli, tmp_path: Path, where: tuple[Any, ...], value: Any, said: str
) -> None:
    doc = _written().document()
    at = doc
    for k in where[:-1]:
        at = at[k]
    at[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserInputError) as e:
        read_result(path)
    assert str(e.value.message) == f"{path} is a damaged toolchain bench result: {said}"
    for args in (
        ["bench", "report", path, "--out", tmp_path / "rep"],
        ["diagnose", "--bench", path],
        ["plan", REPO / "engine_specs" / "tiny.yaml", "--measured", path],
    ):
        r = cli(*args)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), (args, r.output)
        assert said in lines[0] and "pydantic" not in lines[0] and "validation error" not in lines[0]


@pytest.mark.parametrize("version", [RESULT_SCHEMA + 1, 0, "1", 1.0, None])
def test_a_newer_or_garbled_schema_is_refused_in_one_line(version: Any) -> None:
    doc = _written().document()
    doc["schema"] = version
    with pytest.raises(UserInputError) as e:
        parse_result(doc, "r.json")
    assert e.value.message == (
        f"r.json: schema {version!r} is not one this toolchain reads (up to {RESULT_SCHEMA}); upgrade toolchain"
    )


def test_unknown_keys_of_the_same_schema_are_kept_not_refused() -> None:
    """Forward compatible: a newer toolchain of the same schema may add optional fields; they read and survive."""
    doc = _written().document()
    doc["runs"][0]["summary"]["ttft_ms"]["p999"] = 9.0
    doc["future_section"] = {"x": 1}
    res = parse_result(doc, "r.json")
    assert res.document()["future_section"] == {"x": 1}
    assert res.document()["runs"][0]["summary"]["ttft_ms"]["p999"] == 9.0


def test_no_number_in_a_result_is_nan_or_infinite() -> None:
    doc = _written().document()
    doc["runs"][0]["summary"]["wall_s"] = math.inf
    with pytest.raises(UserInputError, match=r"runs\[0\]\.summary\.wall_s is not a finite number"):
        parse_result(doc, "r.json")
    assert isinstance(BenchResult.model_validate(_written().document()), BenchResult)


TRITON_METRICS = """\
nv_inference_request_success{model="m"} N
nv_inference_request_failure{model="m"} 0
nv_inference_queue_duration_us{model="m"} Q
nv_inference_compute_infer_duration_us{model="m"} Q
nv_inference_queue_summary_us{model="m",quantile="0.99"} 900
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.4
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused"} N
nv_gpu_utilization{gpu_uuid="GPU-0"} 0.7
"""
DYNAMO_METRICS = """\
dynamo_frontend_requests_total{status="success"} N
dynamo_component_requests_total{dynamo_component="prefill",dynamo_endpoint="generate"} N
dynamo_component_requests_total{dynamo_component="backend",dynamo_endpoint="generate"} N
dynamo_frontend_time_to_first_token_seconds_count N
dynamo_frontend_time_to_first_token_seconds_sum Q
dynamo_frontend_inter_token_latency_seconds_count N
dynamo_frontend_inter_token_latency_seconds_sum Q
dynamo_frontend_cached_tokens_sum Q
dynamo_frontend_model_kv_cache_block_size 16
dynamo_frontend_queued_requests 1
trtllm:kv_cache_usage_perc 0.3
trtllm:num_requests_waiting 2
trtllm:num_preemptions_total N
"""


@pytest.mark.parametrize("page", [TRITON_METRICS, DYNAMO_METRICS], ids=["triton", "dynamo"])
def test_every_server_figure_is_declared(page: str, valid_result: Any) -> None:
    """Each figure prom.server_side (Triton) and dynamo_metrics.server_side (Dynamo) record is a field of the model
    and the schema, so the closed schema holds the server window too."""
    before = prom.parse(page.replace(" N\n", " 0\n").replace(" Q\n", " 0\n"))
    after = prom.parse(page.replace(" N\n", " 8\n").replace(" Q\n", " 4000\n"))
    window = prom.server_side(before, after, [after, after], "m")
    assert len(window) >= 10, window  # every figure above was measured
    doc = json.loads(json.dumps(_written(server=window).document()))
    valid_result(doc)
    assert parse_result(doc, "r.json").runs[0].server is not None
