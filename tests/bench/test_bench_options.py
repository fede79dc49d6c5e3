"""BenchOptions (toolchain/bench/options.py): the bench flags in one frozen object that owns every rule on how
they combine, checked when it is made (before the tokenizer, the spec or the trace is read)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from tests.bench.workloads import bench_args
from toolchain.bench.loadgen import Load
from toolchain.bench.options import BenchOptions
from toolchain.errors import UserInputError


def test_options_are_frozen_and_derive_their_loads() -> None:
    o = BenchOptions(**bench_args(rate="1,2", poisson=True, duration=5.0))
    assert o.loads == (Load(rate=1.0, poisson=True, duration_s=5.0), Load(rate=2.0, poisson=True, duration_s=5.0))
    assert o.search_plan is None
    with pytest.raises(dataclasses.FrozenInstanceError):
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
        ({"trace": Path("t.jsonl"), "shared": "2:8:0.5"}, "--shared-prefix cannot be combined with it"),
        ({"trace": Path("t.jsonl"), "trace_block_tokens": 0}, "--trace-block-tokens must be at least 1"),
        ({"trace_speed": "2"}, "--trace-speed scales a --trace"),
        ({"slo_search": "concurrency", "concurrency": "4"}, "--slo-search chooses its own load points"),
        ({"slo_max": 8.0}, "shape an --slo-search"),
        ({"slo_search": "latency"}, "--slo-search takes concurrency or rate"),
        ({"slo_goodput": 1.5}, "--slo-goodput is a fraction"),
        ({"requests": 0}, "--requests must be at least 1"),
        ({"warmup": -1}, "--warmup must be 0 or more"),
        ({"timeout": 0.0}, "--timeout must be a positive number"),
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


# the CLI's parameter names that differ from the option they set; the rest are spelled alike
CLI_RENAMES = {"shared_prefix": "shared", "dataset": "dataset_path", "cell": "cell_id"}
CLI_ONLY = {"ctx", "save", "json_out"}  # what to do with the result, not what to measure


def test_every_bench_flag_is_a_field_of_the_options() -> None:
    """A flag added to `toolchain bench` without a field here (or a field no flag sets) fails."""
    from toolchain.cli.bench_cmd import bench

    flags = {CLI_RENAMES.get(p, p) for p in inspect.signature(bench).parameters} - CLI_ONLY
    fields = {f.name for f in dataclasses.fields(BenchOptions) if f.init}
    assert flags == fields
