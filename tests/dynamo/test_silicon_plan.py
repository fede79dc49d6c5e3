"""`dynamo plan` from the silicon estimate (issue 33, item 4): the shipped disaggregated spec's pools timed by NVIDIA
AIConfigurator's measured database, held against AIConfigurator's own CLI figures
(tests/reference/aiconfigurator_dynamo_0.12.0.json, recorded by benchmarks/record_aic_dynamo.py; no toolchain code
computes them), the floor beside it as a lower bound, and the mocker timed from the same estimate."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Cli
from tests.dynamo.conftest import DISAGG

pytestmark = pytest.mark.slow  # AIConfigurator's database loads for seconds to a minute

REF = json.loads((REPO / "tests" / "reference" / "aiconfigurator_dynamo_0.12.0.json").read_text())
TPOT_SLO = 40.0  # the shipped spec's slo.tpot_ms p99
AVG_OUT = 300


def _ref(mode: str, batch: int) -> dict[str, Any]:
    return next(r for r in REF["estimates"] if r["mode"] == mode and r["batch"] == batch)


def _largest_within(mode: str, cap: int) -> dict[str, Any]:
    """The reference's largest ladder batch (up to the cell's max batch) whose TPOT meets the SLO."""
    ok = [r for r in REF["estimates"] if r["mode"] == mode and r["batch"] <= cap and r["tpot_ms"] <= TPOT_SLO]
    return max(ok, key=lambda r: r["batch"])


@pytest.fixture(scope="module")
def plans() -> tuple[Any, Any]:
    from toolchain.dynamo.pipeline import plan_spec

    return plan_spec(DISAGG, estimator="aic").plan, plan_spec(DISAGG, estimator="floor").plan


def test_pools_are_timed_by_aiconfigurators_own_figures(plans: tuple[Any, Any]) -> None:
    silicon, _floor = plans
    pre, dec = silicon.pool("prefill"), silicon.pool("decode")
    ctx = _ref("static_ctx", 1)
    assert math.isclose(pre.prefill_ms, ctx["ttft_ms"], rel_tol=1e-3)
    assert math.isclose(pre.rps_per_worker, 1000.0 / ctx["ttft_ms"], rel_tol=1e-3)
    gen = _largest_within("static_gen", 64)
    assert dec.batch == gen["batch"] and math.isclose(dec.step_ms, gen["tpot_ms"], rel_tol=1e-3)
    assert math.isclose(dec.rps_per_worker, gen["tok_s"] / AVG_OUT, rel_tol=2e-3)
    agg = _largest_within("agg", 64)  # the aggregated fleet at the same SLOs: mixed steps, chunks included
    assert silicon.aggregated.batch == agg["batch"]
    assert math.isclose(silicon.aggregated_tpot_p99_ms, agg["tpot_ms"], rel_tol=1e-3)
    for p in (pre, dec, silicon.aggregated):
        assert p.source.startswith("aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on h100_sxm"), p.source
    assert silicon.estimator == "aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on h100_sxm)"


def test_the_floor_stays_beside_it_as_a_lower_bound(plans: tuple[Any, Any]) -> None:
    silicon, floor = plans
    assert silicon.floor_gpus == floor.total_gpus and floor.estimator == "floor"
    assert floor.total_gpus <= silicon.total_gpus
    for role in ("prefill", "decode"):
        s, f = silicon.pool(role), floor.pool(role)
        assert f.prefill_ms <= s.prefill_ms
        if role == "decode":
            assert f.step_ms <= s.step_ms * (1 + 1e-9) or f.batch < s.batch


def test_the_cli_names_what_timed_the_pools(cli: Cli) -> None:
    r = cli("dynamo", "plan", DISAGG, "--explain")
    assert r.exit_code == 0, r.output
    assert "timed by aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on h100_sxm)" in r.output
    assert "the roofline floor needs" in r.output and "static_gen" in r.output
    floor = cli("dynamo", "plan", DISAGG, "--estimator", "floor")
    assert floor.exit_code == 0 and "timed by the roofline floor" in floor.output


def test_without_the_database_auto_falls_back_visibly_and_aic_refuses(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TOOLCHAIN_AIC_PYTHON", str(tmp_path / "no-python"))
    r = cli("dynamo", "plan", DISAGG)
    assert r.exit_code == 0, r.output
    assert "timed by the roofline floor" in r.output and "AIConfigurator 0.12.0 is not installed" in r.output
    r = cli("dynamo", "plan", DISAGG, "--estimator", "aic")
    assert r.exit_code == 3, r.output
    assert len(r.output.strip().splitlines()) == 1 and "not installed" in r.output


def test_the_mocker_is_timed_by_the_estimate(plans: tuple[Any, Any], tmp_path: Path) -> None:
    """The decode profile the mocker interpolates passes through the estimate's steps at batch 1 and the pool's."""
    import struct

    from toolchain.dynamo.local import timing_of
    from toolchain.dynamo.pipeline import plan_spec
    from toolchain.dynamo.timing import write_profile

    silicon, _ = plans
    cell = plan_spec(DISAGG, estimator="floor").cell
    dec = silicon.pool("decode")
    t = timing_of(dec, silicon, cell)
    b1 = _ref("static_gen", 1)["tpot_ms"]
    # the line's two anchor points, at the planner's mean context per request
    got_1 = t.step_ms(_kv(silicon, 1))
    got_b = t.step_ms(_kv(silicon, dec.batch))
    assert math.isclose(got_1, b1, rel_tol=1e-3) and math.isclose(got_b, dec.step_ms, rel_tol=1e-3)
    path = write_profile(tmp_path / "p.npz", t)
    with zipfile.ZipFile(path) as z:
        raw = z.read("decode_itl.npy")
    (header_len,) = struct.unpack("<H", raw[8:10])  # .npy 1.0: magic, version, header length, header, data
    data = raw[10 + header_len :]
    itl = struct.unpack(f"<{len(data) // 8}d", data)
    assert min(itl) >= t.step_base_ms - 1e-9 and max(itl) > b1  # the table the mocker reads is the estimate's line


def _kv(plan: Any, batch: int) -> float:
    """Active KV tokens of ``batch`` requests at the mean context (mean prompt + half the mean output)."""
    from toolchain.dynamo.pipeline import plan_spec
    from toolchain.planning.plan import plan_cell

    planned = plan_spec(DISAGG, estimator="floor")
    return float(batch * plan_cell(planned.cell, planned.arch).avg_context)
