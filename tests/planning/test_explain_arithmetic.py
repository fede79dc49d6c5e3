"""`plan --explain` can be redone from what it prints (issue 46): every fleet line shows the utilization target,
the burst headroom and the rounding to whole instances, and its numbers recompute; the TPOT floor divides the
bytes one TP rank reads by the HBM bandwidth once; no "1 GPUs"."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, Cli

NUM = r"([\d,]+(?:\.\d+)?)"
FLEET = re.compile(
    rf"peak {NUM} tok/s ÷ {NUM} tok/s per instance = {NUM} instances; at full load ceil\({NUM}\) = (\d+) × (\d+) "
    rf"GPUs? = (\d+) GPUs?; {NUM} × (\d+) ÷ utilization {NUM} × headroom {NUM} = {NUM} GPUs → (\d+), "
    rf"in whole instances of (\d+): (\d+) × (\d+) = (\d+) GPUs?"
)
TPOT = re.compile(rf"TPOT floor \(batch 1\) = .*? = \({NUM} GB \+ {NUM} GB\) ÷ {NUM} TB/s = {NUM} ms")
SPECS = ["llama-3.3-70b-fp8-h100.yaml", "llama-3.3-70b-fp8-h200.yaml", "mistral-7b-int4-awq.yaml"]


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def _half_ulp(s: str) -> float:
    """Half the last printed digit: how far the printed number may be from the one it stands for."""
    return 0.5 * 10.0 ** -_decimals(s)


def check_fleet_line(line: str, utilization: float, headroom: float) -> None:
    m = FLEET.search(line)
    assert m, f"a fleet line that cannot be redone: {line!r}"
    peak, per, raw, raw_again, full_n, g, full_gpus, raw2, g2, u, h, exact, ceiled, g3, inst, g4, total = m.groups()
    assert raw == raw_again == raw2 and g == g2 == g3 == g4
    assert (_f(u), _f(h)) == (utilization, headroom)  # the spec's own figures are printed
    # raw instances = peak ÷ per-instance rate, within the digits printed
    p, r, x = _f(peak), _f(per), _f(raw)
    slack = (p + _half_ulp(peak)) / (r - _half_ulp(per)) - p / r
    assert abs(x - p / r) <= slack + _half_ulp(raw)
    # full load: whole instances of the raw figure
    assert int(full_n) == max(1, math.ceil(x)) and int(full_gpus) == int(full_n) * int(g)
    # utilization and headroom, then rounding up to whole GPUs, then to whole instances
    e = _f(exact)
    assert abs(e - x * int(g) / _f(u) * _f(h)) <= _half_ulp(raw) * int(g) / _f(u) * _f(h) + _half_ulp(exact)
    assert int(ceiled) == math.ceil(e)
    assert int(inst) == -(-int(ceiled) // int(g)) and int(total) == int(inst) * int(g)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("estimator", ["floor", "auto"])
def test_explain_recomputes(cli: Cli, name: str, estimator: str) -> None:
    spec = REPO / "engine_specs" / name
    traffic = yaml.safe_load(spec.read_text()).get("traffic") or {}
    # the defaults of a spec's traffic block (docs/spec.md): 0.75 utilization, 1.2 burst headroom
    utilization, headroom = traffic.get("target_utilization", 0.75), traffic.get("burst_headroom", 1.2)
    r = cli("plan", spec, "--explain", "--estimator", estimator)
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert not re.search(r"\b1 GPUs\b", text)
    fleets = [ln for ln in text.splitlines() if "fleet" in ln and "tok/s per instance" in ln]
    assert fleets, text
    for line in fleets:
        check_fleet_line(line, utilization, headroom)
    tpot = TPOT.search(text)
    assert tpot, text
    weights, kv, tbs, ms = (_f(v) for v in tpot.groups())
    assert ms == pytest.approx((weights + kv) / tbs, rel=0.005, abs=0.01)  # GB ÷ TB/s = ms, divided once


def test_a_fleet_line_that_hides_its_figures_is_caught() -> None:
    """The line `plan --explain` printed before (issue 46) does not pass the check."""
    old = (
        "estimated fleet: peak 6,000 tok/s ÷ 843 tok/s per instance (batch 32) = 7.12 instances × 2 GPUs = 16 GPUs "
        "at full load → ÷ utilization × headroom = 24 GPUs (12 instances)"
    )
    with pytest.raises(AssertionError):
        check_fleet_line(old, 0.75, 1.2)


def test_the_deploy_sizing_names_the_fleets_figures(cli: Cli, tmp_path: Path) -> None:
    r = cli("deploy", REPO / "engine_specs" / "llama-3.3-70b-fp8-h100.yaml", "--dry-run")
    assert r.exit_code == 0, r.output
    (line,) = [ln for ln in r.stdout.splitlines() if "replicas = " in ln]
    assert "utilization 0.75 × headroom 1.2" in line and "instances of 2 GPUs" in line
