"""AIConfigurator is asked about the checkpoint that ships, and `plan --search` reports what it did.

Reference: tests/reference/aiconfigurator_0.12.0_checkpoint.json, recorded by benchmarks/record_aic_checkpoint.py
from AIConfigurator 0.12.0's own CLI (`aiconfigurator cli estimate` / `recommend`, each command in the file) on
model directories whose config.json carries ModelOpt's quantization_config, no quant-mode flag given: the modes
are the ones AIConfigurator infers itself. No toolchain code computes those figures. The configurations (lengths,
batches off the powers of two, context tokens per step, NVFP4 on B200, a 70B fleet) are ones
tests/reference/aiconfigurator_0.12.0.json never used.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from toolchain.planning import estimate as E
from toolchain.planning.search import SearchResult, search_spec, write_spec
from toolchain.planning.spec_plan import plan_spec
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

pytestmark = pytest.mark.slow  # AIConfigurator's database loads for seconds

REF = json.loads((REPO / "tests" / "reference" / "aiconfigurator_0.12.0_checkpoint.json").read_text())
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "b200_sxm": "B200"}
OLD = json.loads((REPO / "tests" / "reference" / "aiconfigurator_0.12.0.json").read_text())


def _spec(tmp: Path, name: str, row: dict[str, Any], **extra: Any) -> Path:
    """A spec of one cell for a reference row: its model, formats, GPU, TP, batch and lengths."""
    d: dict[str, Any] = {
        "name": name,
        "model": {"source": f"hf://meta-llama/{row['model']}@main", "dtype": "bfloat16", "architecture": row["model"]},
        "quantization": {"weights": row["weights"], "kv_cache": row.get("kv_cache", "fp8")},
        "runtime": "tensorrt",
        "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
        "matrix": {
            "gpu": [GPUS[row["system"]]],
            "max_batch_size": [row.get("batch", 64)],
            "max_seq_len": [row["isl"] + row["osl"]],
            "max_input_len": [row["isl"]],
            "tp": [row.get("tp", 1)],
        },
        "build": {"max_num_tokens": 8192},
        "traffic": {
            "peak_rps": row.get("rate", 1),
            "input_tokens": {"dist": "fixed", "mean": row["isl"]},
            "output_tokens": {"dist": "fixed", "mean": row["osl"]},
        },
        **extra,
    }
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_the_reference_is_aiconfigurators_own_on_new_configurations() -> None:
    assert "no toolchain code" in REF["source"] and "record_aic_checkpoint.py" in REF["source"]
    for r in REF["estimates"]:
        assert r["command"].startswith("aiconfigurator cli estimate") and "quant-mode" not in r["command"]
        assert r["modes"]["gemm"] in {"fp8_static", "nvfp4"} and r["modes"]["fmha"] == "fp8"
    assert all(r["command"].startswith("aiconfigurator cli recommend") for r in REF["recommend"])
    old = {(r["model"], r["system"], r["tp"], r["batch"], OLD["isl"], OLD["osl"]) for r in OLD["estimates"]}
    new = {(r["model"], r["system"], r["tp"], r["batch"], r["isl"], r["osl"]) for r in REF["estimates"]}
    assert not old & new


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, E.Session]]:
    """One worker per model shape, shared by every row."""
    tmp = tmp_path_factory.mktemp("models")
    out: dict[str, E.Session] = {}
    for model in sorted({r["model"] for r in REF["estimates"]}):
        row = next(r for r in REF["estimates"] if r["model"] == model)
        arch = arch_for_spec(load_spec(_spec(tmp, f"s-{model}", row)))
        session = E.start(arch, None)
        assert session is not None, "scripts/setup-aic.sh installs AIConfigurator"
        out[model] = session
    yield out
    for s in out.values():
        s.close()


@pytest.mark.parametrize(
    "row",
    REF["estimates"],
    ids=lambda r: f"{r['model']}-{r['weights']}-kv{r['kv_cache']}-{r['system']}-b{r['batch']}-c{r['ctx_tokens']}",
)
def test_the_estimate_is_aiconfigurators_for_the_checkpoint_that_ships(
    sessions: dict[str, E.Session], tmp_path: Path, row: dict[str, Any]
) -> None:
    """The same cell as AIConfigurator's CLI on the checkpoint: the same quant modes, TPOT and TTFT within 10 %."""
    (cell,) = expand(load_spec(_spec(tmp_path, "row", row)))
    e = sessions[row["model"]].ask(E.query(cell, row["batch"], ctx_tokens=row["ctx_tokens"]))
    assert isinstance(e, E.Estimate), e
    want = {k: row["modes"][k] for k in ("gemm", "fmha", "kvcache")}
    assert {k: e.modes[k] for k in want} == want
    assert e.tpot_ms == pytest.approx(row["tpot_ms"], rel=0.10)
    assert e.ttft_ms == pytest.approx(row["ttft_ms"], rel=0.10)
    assert e.ctx_tokens == row["ctx_tokens"]


def test_the_issue_cell_tpot_and_the_modes_are_said(tmp_path: Path) -> None:
    """8B FP8, B200, batch 8, 4096 / 512: AIConfigurator says 3.31 ms (the toolchain said 4.61 with BF16 attention);
    the plan names the modes it ran, in --json and in --explain."""
    from toolchain.planning.plan import explain

    row = REF["estimates"][0]
    assert (row["system"], row["batch"], row["isl"], row["osl"], row["tpot_ms"]) == ("b200_sxm", 8, 4096, 512, 3.308)
    sp = plan_spec(load_spec(_spec(tmp_path, "issue", row)), estimator="aic")
    (plan,) = sp.plans
    assert plan.estimate is not None
    assert plan.estimate["modes"]["gemm"] == "fp8_static" and plan.estimate["modes"]["fmha"] == "fp8"
    point = next(c for c in plan.estimate["curve"] if c["batch"] == 8 and c["ctx_tokens"] == 4096)
    assert point["tpot_ms"] == pytest.approx(row["tpot_ms"], rel=0.10)
    assert "quant modes: gemm fp8_static, fmha fp8, KV fp8" in explain(plan, sp.arch)
    assert json.loads(json.dumps(sp.to_json()))["cells"][0]["estimate"]["at_batch"]["modes"]["fmha"] == "fp8"


def test_kv_auto_with_fp8_weights_is_said_where_aiconfigurator_runs_fp8_kv(sessions: dict[str, E.Session]) -> None:
    assert E.kv_differs({"kvcache": "fp8", "fmha": "fp8"}, "auto") is not None
    assert E.kv_differs({"kvcache": "fp8"}, "fp8") is None
    qc, gemm, kv = E.quantization("int4_awq", "fp8")
    assert qc == {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"} and gemm == "int4_wo" and kv is None


# --- the search: the 70B fleet of the issue, against `aiconfigurator cli recommend` ---------------------------


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[SearchResult, list[tuple[Any, ...]], Path]:
    rec = REF["recommend"][0]
    tmp = tmp_path_factory.mktemp("search70b")
    slo = {"ttft_ms": {"p99": rec["ttft_ms"]}, "tpot_ms": {"p99": rec["tpot_ms"]}}
    path = _spec(tmp, "fleet-70b", {**rec, "tp": 2}, slo=slo)
    path.write_text("# the issue's 70B fleet\n" + path.read_text().replace("runtime:", "# the runtime\nruntime:"))
    calls: list[tuple[Any, ...]] = []

    def progress(stage: str, done: float | None = None, total: float | None = None, **kw: Any) -> None:
        calls.append((stage, done, total))

    result = search_spec(
        load_spec(path), gpus=["H100-SXM"], formats=["fp8", "bf16"], tps=[2, 4], estimator="aic", progress=progress
    )
    return result, calls, path


def test_the_fleet_is_within_one_gpu_of_recommend(searched: tuple[SearchResult, list[tuple[Any, ...]], Path]) -> None:
    """AIConfigurator's `recommend` says 6 H100s at full load (the toolchain said 8: BF16 attention, a power-of-two
    batch ladder, one ISL of context per step)."""
    result, _, _ = searched
    theirs = REF["recommend"][0]["agg_gpus"]
    assert theirs == 6
    best = result.best
    assert best is not None and best.gpus_at_full_load is not None
    assert abs(best.gpus_at_full_load - theirs) <= 1, best
    assert best.modes["fmha"] == "fp8"
    assert best.max_batch_size is not None and best.max_batch_size & (best.max_batch_size - 1)  # not a power of 2


def test_invalid_combinations_are_apart_and_every_kv_dtype_is_tried(
    searched: tuple[SearchResult, list[tuple[Any, ...]], Path],
) -> None:
    result, _, _ = searched
    kinds = {(c.weights, c.kv_cache): c.kind for c in result.rejected}
    assert kinds[("bf16", "fp8")] == "invalid"  # FP8 KV with BF16 weights: the rules refuse it, no SLO miss
    tried = {(c.weights, c.kv_cache) for c in result.ranked + result.floor_only}
    assert ("bf16", "auto") in tried and ("fp8", "auto") in tried and ("fp8", "fp8") in tried
    refusals = result.refusals()
    assert len({(k, w) for k, w, _ in refusals}) == len(refusals)  # each reason once
    assert sum(n for _, _, n in refusals) == len(result.rejected)
    assert all(k != "slo" or "SLO" in w for k, w, _ in refusals)


def test_progress_is_one_counted_stage(searched: tuple[SearchResult, list[tuple[Any, ...]], Path]) -> None:
    _, calls, _ = searched
    counted = [c for c in calls if c[1] is not None]
    assert {c[0] for c in counted} == {"search"} and counted[-1][1] == counted[-1][2]
    assert len([c for c in calls if c[1] is None]) <= 3  # starting, loading the one database


def test_the_summary_fits_80_columns_and_says_each_reason_once(
    searched: tuple[SearchResult, list[tuple[Any, ...]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from toolchain.cli.plan_cmd import _print_search

    result, _, _ = searched
    buf = io.StringIO()
    with redirect_stdout(buf):
        _print_search(result, 5, False)
    captured = capsys.readouterr()
    text = buf.getvalue() + captured.out + captured.err
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "cannot be built" in text and "configurations cannot serve" not in text
    assert "AIConfigurator ran gemm fp8_static, fmha fp8, KV fp8" in text


def test_write_names_the_choice_and_keeps_the_comments(
    searched: tuple[SearchResult, list[tuple[Any, ...]], Path], tmp_path: Path
) -> None:
    result, _, src = searched
    best = result.best
    assert best is not None
    out = write_spec(src, tmp_path / "picked.yaml", best, result)
    text = out.read_text()
    assert "# the issue's 70B fleet" in text and "# the runtime" in text
    spec = load_spec(out)
    assert spec.name.endswith(f"-h100-sxm-{best.weights}-kv-{best.kv_cache}-tp{best.tp}")
    assert best.config in (spec.description or "")
    assert spec.quantization.kv_cache == best.kv_cache and spec.matrix.max_batch_size == [best.max_batch_size]


def test_the_batches_and_context_budgets_are_aiconfigurators_sweep() -> None:
    """The oracle is AIConfigurator's own sweep code (aiconfigurator/sdk/sweep.py), run in its venv: the batches
    and context tokens per step a cell is estimated at are the ones `recommend` explores."""
    import subprocess

    python = E.aic_python()
    assert python is not None
    code = (
        "import json; from aiconfigurator.sdk.sweep import _DEFAULT_AGG_BATCH_SCHEDULE as s, _agg_ctx_tokens_list as c;"
        "print(json.dumps([list(s), {i: c(i, 512, False) for i in (300, 1024, 2048, 4096, 9000)}]))"
    )
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    batches, ctx = json.loads(r.stdout.strip().splitlines()[-1])
    assert E.schedule(1024) == batches
    assert E.schedule(100) == [b for b in batches if b < 100] + [100]
    for isl, want in ctx.items():
        assert E.ctx_tokens_list(int(isl)) == want, isl
