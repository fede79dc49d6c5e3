"""BenchOptions (toolchain/bench/options.py): the bench flags in one frozen object that owns every rule on how
they combine, checked when it is made (before the tokenizer, the spec or the trace is read)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.bench.workloads import bench_args
from toolchain.bench.options import BenchOptions
from toolchain.bench.result import Load
from toolchain.errors import UserInputError

ROOT = Path(__file__).resolve().parents[2]


def test_options_are_frozen_and_derive_their_loads() -> None:
    o = BenchOptions(**bench_args(rate="1,2", poisson=True, duration=5.0))
    assert o.loads == (Load(rate=1.0, poisson=True, duration_s=5.0), Load(rate=2.0, poisson=True, duration_s=5.0))
    assert o.search_plan is None
    with pytest.raises(ValidationError, match="frozen"):
        o.requests = 5  # type: ignore[misc]
    s = BenchOptions(**bench_args(slo_search="rate", slo_max=8.0, slo_ttft_ms=100.0, poisson=True))
    assert s.search_plan is not None and s.search_plan.limit == 8.0 and s.search_plan.poisson
    t = BenchOptions(**bench_args(trace=Path("/nowhere/t.jsonl"), trace_speed="1,2"))
    assert [ld.label() for ld in t.loads] == ["trace=t.jsonl x1", "trace=t.jsonl x2"]  # no file read yet


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"url": ""}, "--url is required"),
        ({"protocol": "grpc"}, "unknown protocol 'grpc'"),
        ({"workers": 0}, "--workers must be from 1 to 256"),
        ({"workers": True}, "--workers must be from 1 to 256"),
        ({"concurrency": "1", "rate": "2"}, "choose --concurrency or --rate, not both"),
        ({"concurrency": "1,x"}, "cannot read the list '1,x'"),
        ({"trace": Path("t.jsonl"), "rate": "2"}, "--rate cannot be combined with it"),
        ({"trace": Path("t.jsonl"), "shared_prefix": "2:8:0.5"}, "--shared-prefix cannot be combined with it"),
        ({"trace": Path("t.jsonl"), "trace_block_tokens": 0}, "--trace-block-tokens must be at least 1"),
        ({"trace_speed": "2"}, "--trace-speed scales a --trace"),
        ({"slo_search": "concurrency", "concurrency": "4"}, "--slo-search chooses its own load points"),
        ({"slo_max": 8.0}, "shape an --slo-search"),
        ({"slo_search": "latency"}, "--slo-search takes concurrency or rate"),
        ({"slo_goodput": 1.5}, "--slo-goodput is a fraction"),
        ({"requests": 0}, "--requests must be at least 1"),
        ({"warmup": -1}, "--warmup must be 0 or more"),
        ({"timeout": 0.0}, "--timeout must be a positive number"),
        ({"idle_timeout": float("inf")}, "--idle-timeout must be a positive number of seconds"),
        ({"requests": "4"}, "--requests must be a whole number"),
        ({"concurency": "4"}, "bench has no option 'concurency'"),
        ({"num_draft_tokens": 0}, "--num-draft-tokens must be at least 1"),
    ],
)
def test_every_flag_rule_is_checked_when_the_options_are_made(over: dict[str, Any], said: str) -> None:
    """No tokenizer, spec or trace exists here: each mistake is found before anything is read."""
    with pytest.raises(UserInputError, match=said):
        BenchOptions(**bench_args(**over))


def test_options_are_the_one_argument_of_make_config_and_run_benchmark() -> None:
    from toolchain.bench.setup import make_config
    from toolchain.pipeline.bench import run_benchmark

    assert list(inspect.signature(make_config).parameters) == ["opts"]
    params = inspect.signature(run_benchmark).parameters
    assert [p for p, v in params.items() if v.kind is not inspect.Parameter.KEYWORD_ONLY] == ["opts"]


def test_the_run_takes_the_options_and_the_workload_and_no_copy_of_them() -> None:
    """BenchConfig (the flags copied beside the workload) is gone: every step of the run takes the options
    themselves and the frozen workload make_config prepared."""
    import typing

    import toolchain.bench.run as run
    from toolchain.bench import search, workers
    from toolchain.bench.run import BenchWorkload

    assert not hasattr(run, "BenchConfig")
    for f in (run.run_bench, run.measure_point, run._run_load, run._server_window, run._result_document):
        hints = typing.get_type_hints(f)
        assert (hints["opts"], hints["work"]) == (BenchOptions, BenchWorkload), f
    hints = typing.get_type_hints(search.run_search)
    assert (hints["opts"], hints["work"]) == (BenchOptions, BenchWorkload)
    assert typing.get_type_hints(workers.run_load_workers)["opts"] is BenchOptions


CLI_ONLY = {"ctx", "save", "json_out"}  # what to do with the result, not what to measure


def test_the_bench_command_is_built_from_the_options() -> None:
    """Each `toolchain bench` flag is a field of BenchOptions, spelled alike, with the field's help."""
    from toolchain.cli.main import command_tree

    group = command_tree().commands["bench"]
    opts = {p.name: p for p in group.params if p.name not in CLI_ONLY}
    assert list(opts) == list(BenchOptions.model_fields)
    for name, field in BenchOptions.model_fields.items():
        assert opts[name].opts[0] == "--" + name.replace("_", "-")
        assert opts[name].help == field.description and field.description
    assert opts["stream"].secondary_opts == ["--no-stream"] and opts["poisson"].is_flag
    assert [e.value for e in opts["protocol"].type_descriptor.annotation] == ["triton", "openai", "openai-chat"]
    assert opts["requests"].default == 32 and opts["warmup"].default == 2 and opts["url"].default is None


def _keywords(path: Path) -> list[set[str]]:
    """The keyword names of every call in a file, and the string keys of every dict literal."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            out.append({k.arg for k in node.keywords if k.arg})
        elif isinstance(node, ast.Dict):
            out.append({k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)})
    return out


def spellers(files: list[Path], fields: set[str]) -> list[str]:
    """Files with a call or dict that names more than half the bench fields: a second copy of the list (a caller
    that sets the few options it needs is not one)."""
    return sorted(str(p) for p in files if any(2 * len(ks & fields) > len(fields) for ks in _keywords(p)))


def test_no_other_module_spells_the_flag_list(tmp_path: Path) -> None:
    fields = set(BenchOptions.model_fields)
    files = [p for d in ("toolchain", "tests", "scripts", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    assert spellers(files, fields) == []
    copy = tmp_path / "copy.py"  # the check sees a copy: the CLI's old way of passing each flag by name
    copy.write_text("BenchOptions(" + ", ".join(f"{f}={f}" for f in sorted(fields)[: len(fields) // 2 + 1]) + ")\n")
    assert spellers([copy], fields) == [str(copy)]


def test_the_prepared_workload_holds_no_flag_and_is_never_changed() -> None:
    """A BenchConfig once copied the flags beside the workload (with a warm-up default of its own, 1, where the
    flag's is 2) and was changed after it was built (its SLOs, by a search). The run now takes the options
    themselves and a frozen workload that holds none of their fields."""
    import dataclasses

    from toolchain.bench.run import BenchWorkload

    fields = {f.name for f in dataclasses.fields(BenchWorkload)}
    assert fields == {"served", "requests", "slo", "provenance", "metrics_model", "more"}
    assert not fields & (set(BenchOptions.model_fields) - {"requests"})  # ``requests``: the flag is a count
    work = BenchWorkload("m", [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        work.slo = {}  # type: ignore[misc]
