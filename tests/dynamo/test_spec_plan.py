"""The spec's dynamo block (rules with reasons) and the pool planner (SLOs and traffic to pools, KV transfer)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.dynamo.conftest import DISAGG
from toolchain.dynamo.pipeline import plan_spec
from toolchain.errors import PlanError


@pytest.mark.slow
def test_shipped_spec_validates_and_plans(cli: Cli) -> None:
    r = cli("spec", "validate", DISAGG)
    assert r.exit_code == 0, r.output
    r = cli("dynamo", "plan", DISAGG, "--explain")
    assert r.exit_code == 0, r.output
    assert "prefill" in r.output and "decode" in r.output and "aggregated" in r.output
    assert "verdict:" in r.output


def test_kv_bytes_of_a_70b_gqa_prompt_is_0_34_gb_not_2_68(spec_variant: Callable[..., Path]) -> None:
    """2048 tokens of INT8 KV for Llama-3.3-70B (80 layers, 8 KV heads, head dim 128): 2·80·8·128·1·2048 bytes.
    The slip multiplies by the 64 query heads instead of the 8 KV heads (8× too much: 2.68 GB)."""
    spec = spec_variant(
        {
            "quantization": {"kv_cache": "int8"},
            "serving": {"enable_prefix_caching": False, "enable_chunked_prefill": False},
            "traffic": {"input_tokens": {"dist": "fixed", "mean": 2048, "std": 0, "min": None, "max": None}},
        }
    )
    p = plan_spec(spec).plan
    assert p.kv_bytes_per_request == 2 * 80 * 8 * 128 * 1 * 2048 == 335_544_320
    assert round(p.kv_bytes_per_request / 1e9, 2) == 0.34
    # transfer over InfiniBand NDR, 50 GB/s per GPU, two ranks each sending its shard
    assert p.transfer_ms == pytest.approx(335_544_320 / (50e9 * 2) * 1000)


@pytest.mark.slow
def test_explain_shows_the_kv_arithmetic(cli: Cli) -> None:
    r = cli("dynamo", "plan", DISAGG, "--explain")
    assert "2 × 80 layers × 8 KV heads × 128 head dim × 1 B × 2048 tokens = 335,544,320 B = 0.34 GB" in r.output


@pytest.mark.parametrize("estimator", ["floor", "auto"])
def test_explain_says_each_fact_once(cli: Cli, estimator: str) -> None:
    """Issue 49: `dynamo plan --explain` printed the notes twice (in the explanation and on stderr), and the
    summary's verdict and TTFT/TPOT line before the explanation that repeats them."""
    r = cli("dynamo", "plan", DISAGG, "--explain", "--estimator", estimator)
    assert r.exit_code == 0, r.output
    assert r.output.count("prefill worker KV budget") == 1, r.output
    lines = [ln.strip() for ln in r.output.splitlines() if ln.strip()]
    assert sum(ln.startswith("verdict") for ln in lines) <= 1, r.output
    repeated = {ln for ln in lines if lines.count(ln) > 1 and any(c.isalpha() for c in ln)}
    assert repeated == set(), r.output


@pytest.mark.slow
def test_json_plan_has_both_fleets(cli: Cli) -> None:
    r = cli("dynamo", "plan", DISAGG, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    roles = [p["role"] for p in d["pools"]]
    assert roles == ["prefill", "decode"] and d["aggregated"]["role"] == "workers"
    assert d["total_gpus"] == sum(p["gpus"] for p in d["pools"])


def test_pools_grow_with_traffic(spec_variant: Callable[..., Path]) -> None:
    low = plan_spec(spec_variant({"traffic": {"peak_rps": 2}}, "low.yaml")).plan
    high = plan_spec(spec_variant({"traffic": {"peak_rps": 40}}, "high.yaml")).plan
    for role in ("prefill", "decode"):
        assert high.pool(role).replicas > low.pool(role).replicas


def test_prefill_sizing_follows_compute(spec_variant: Callable[..., Path]) -> None:
    """Prefill capacity is compute: twice the prompt, half the requests per prefill worker."""
    base = plan_spec(spec_variant(name="a.yaml")).plan.pool("prefill")
    longer = plan_spec(spec_variant({"traffic": {"input_tokens": {"mean": 4000, "max": 4096}}}, "b.yaml")).plan.pool(
        "prefill"
    )
    assert longer.prefill_ms / base.prefill_ms == pytest.approx(4000 / 2048)
    assert longer.rps_per_worker == pytest.approx(1000 / longer.prefill_ms)


def test_disaggregation_pays_when_prefill_chunks_break_the_tpot_slo() -> None:
    p = plan_spec(DISAGG).plan
    assert p.pays and "pays" in p.verdict
    assert p.aggregated_tpot_p99_ms > 40 > p.tpot_p99_ms


def test_disaggregation_does_not_pay_for_short_chats(spec_variant: Callable[..., Path]) -> None:
    """Short prompts, small chunks: the aggregated fleet meets the SLOs with fewer GPUs."""
    spec = spec_variant(
        {
            "build": {"max_num_tokens": 256},
            "traffic": {
                "peak_rps": 4,
                "input_tokens": {"dist": "fixed", "mean": 128, "std": 0, "min": None, "max": None},
                "output_tokens": {"mean": 300},
            },
        }
    )
    p = plan_spec(spec).plan
    assert not p.pays and "does not pay" in p.verdict
    assert p.aggregated.gpus <= p.total_gpus


def test_fixed_replicas_are_kept(spec_variant: Callable[..., Path]) -> None:
    p = plan_spec(spec_variant({"dynamo": {"prefill": {"replicas": 2}, "decode": {"replicas": 3}}})).plan
    assert (p.pool("prefill").replicas, p.pool("decode").replicas) == (2, 3)
    assert p.pool("prefill").replicas_source == "spec"


def _one_line_error(cli: Cli, *args: object) -> str:
    r = cli(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and " — " in lines[0], r.output
    assert "Traceback" not in r.output
    return lines[0]


def test_tensorrt_runtime_on_dynamo_is_refused(cli: Cli, spec_variant: Callable[..., Path]) -> None:
    spec = spec_variant(
        {
            "runtime": "tensorrt",
            "target": {"trtllm_version": "1.1.0", "container": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"},
        }
    )
    line = _one_line_error(cli, "spec", "validate", spec)
    assert "PyTorch backend only" in line and "runtime: pytorch" in line
    assert "PyTorch backend only" in _one_line_error(cli, "dynamo", "plan", spec)


def test_trtllm_version_and_container_dynamo_needs(cli: Cli, spec_variant: Callable[..., Path]) -> None:
    line = _one_line_error(cli, "spec", "validate", spec_variant({"target": {"trtllm_version": "1.2.0"}}))
    assert "needs TensorRT-LLM 1.3.0rc29" in line and 'target.trtllm_version: "1.3.0rc29"' in line
    spec = spec_variant({"target": {"container": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"}})
    line = _one_line_error(cli, "spec", "validate", spec)
    assert "tensorrtllm-runtime:1.6.1" in line


def test_spec_shape_errors(cli: Cli, spec_variant: Callable[..., Path]) -> None:
    line = _one_line_error(cli, "spec", "validate", spec_variant({"dynamo": {"link": {"kind": "ethernet"}}}))
    assert "bandwidth_gb_s" in line
    spec = spec_variant({"dynamo": {"mode": "aggregated"}})  # prefill/decode pools given
    assert "'workers'" in _one_line_error(cli, "spec", "validate", spec)
    spec = spec_variant({"dynamo": {"decode": {"gpu": "H900"}}})
    assert "unknown GPU 'H900'" in _one_line_error(cli, "spec", "validate", spec)


def test_a_pool_that_cannot_fit_its_gpu(cli: Cli, spec_variant: Callable[..., Path]) -> None:
    spec = spec_variant({"dynamo": {"decode": {"gpu": "L4", "tp": 1}}})
    line = _one_line_error(cli, "dynamo", "plan", spec)
    assert line.startswith("Error: dynamo.decode: L4 TP1:") and "dynamo.decode.tp" in line


def test_a_link_slower_than_the_ttft_budget(cli: Cli, spec_variant: Callable[..., Path]) -> None:
    spec = spec_variant(
        {"dynamo": {"link": {"kind": "ethernet", "bandwidth_gb_s": 0.1}}, "slo": {"ttft_ms": {"p99": 500}}}
    )
    line = _one_line_error(cli, "dynamo", "plan", spec)
    assert "over the whole TTFT SLO 500 ms" in line and "faster dynamo.link" in line
    with pytest.raises(PlanError):
        plan_spec(spec)


@pytest.mark.slow
def test_dynamo_commands_without_dynamo_exit_3(cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from toolchain.dynamo import env

    env._probe.cache_clear()
    monkeypatch.setenv("TOOLCHAIN_DYNAMO_PYTHON", str(tmp_path / "no-python"))
    r = cli("dynamo", "up", DISAGG, "--workdir", tmp_path / "run")
    assert r.exit_code == 3, r.output
    assert "NVIDIA Dynamo 1.6.1 is not installed" in r.output and "scripts/setup-dynamo.sh" in r.output


def test_dynamo_commands_on_a_spec_without_dynamo(cli: Cli) -> None:
    from tests.conftest import SPECS

    spec = SPECS / "llama-3.3-70b-fp8-h100.yaml"
    for args in (("dynamo", "plan", spec), ("dynamo", "up", spec), ("dynamo", "deploy", spec, "--out", "/nonexistent")):
        assert "has no dynamo block" in _one_line_error(cli, *args)


def test_bad_speedup_is_a_one_line_error(cli: Cli, tmp_path: Path) -> None:
    for bad in ("0", "-2", "nan"):
        line = _one_line_error(cli, "dynamo", "up", DISAGG, "--speedup", bad, "--workdir", tmp_path / "w")
        assert "--speedup must be a positive number" in line


def test_dynamo_up_runs_under_the_cache_not_the_system_temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --workdir, the run directory (the logs the ready line points at) is under $TOOLCHAIN_CACHE/dynamo/."""
    from toolchain.dynamo import local, pipeline

    got: dict[str, Path] = {}

    def fake_start(cell: object, plan: object, card: Path, **kw: object) -> str:
        got["workdir"], got["card"] = Path(str(kw["workdir"])), card
        return "started"

    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("toolchain.dynamo.env.dynamo_python", lambda: Path("/usr/bin/python3"))
    monkeypatch.setattr(local, "start_local", fake_start)
    _planned, dep = pipeline.up(DISAGG)
    assert dep == "started"
    assert got["workdir"].parent == tmp_path / "cache" / "dynamo" and got["workdir"].is_dir()
    assert got["card"].is_relative_to(got["workdir"])
