"""The accuracy gate judges the exports that ship (run with the runtime's numerics, quantize.runtime), with the
fake-quant figure beside it as a diagnostic, and prints enough digits to show why it decided (issues 32, 46)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.artifacts.recipe import Recipe
from toolchain.errors import AccuracyGateError
from toolchain.quantize.accuracy import Accuracy, failures
from toolchain.quantize.run import quantize
from toolchain.specs.models import AccuracyGate

FAST: dict[str, Any] = {"samples": 8, "seq_len": 32, "batch_size": 4}
LOOSE = {"max_rel_logit_error": 10.0, "max_ppl_increase": 10.0}


@pytest.mark.slow
def test_fake_quant_passes_but_the_export_fails(tiny_checkpoint: Path, tmp_path: Path) -> None:
    m = quantize(tiny_checkpoint, Recipe("int4_awq", "none", **FAST), tmp_path / "free").manifest["accuracy"]
    fake, dq = m["fakequant"]["top1_agreement"], min(e["top1_agreement"] for e in m["exports"].values())
    assert m["gate"] == "runtime"
    # On the tiny Llama, INT4 AWQ's exported weights agree less than its fake-quant forward (0.6387 vs
    # 0.6839 measured): a threshold between the two is met by fake-quant and missed by what ships.
    assert fake > dq
    limits = AccuracyGate(min_top1_agreement=(fake + dq) / 2, **LOOSE)
    with pytest.raises(AccuracyGateError) as e:
        quantize(tiny_checkpoint, Recipe("int4_awq", "none", **FAST), tmp_path / "gated", accuracy_limits=limits)
    msg = e.value.message
    assert msg.startswith("accuracy gate failed (runtime numerics) on ")
    assert f"top-1 agreement {dq:.4f} < {limits.min_top1_agreement:.4f}" in msg
    assert f"fake-quant, not judged: top-1 {fake:.4f}" in msg
    assert not (tmp_path / "gated").exists()


@pytest.mark.slow
def test_cli_gates_on_the_export_and_shows_fake_quant_beside_it(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    free = quantize(tiny_checkpoint, Recipe("int4_awq", "none", **FAST), tmp_path / "free").manifest["accuracy"]
    fake, dq = free["fakequant"]["top1_agreement"], free["runtime"]["top1_agreement"]
    args = ("--calib-samples", "8", "--calib-seq-len", "32", "--calib-batch-size", "4")
    between = f"{(fake + dq) / 2:.6f}"
    res = cli(
        "quantize", "--checkpoint", tiny_checkpoint, "--weights", "int4_awq", "--out", tmp_path / "q", *args,
        "--min-top1-agreement", between, "--max-rel-logit-error", "10", "--max-ppl-increase", "10",
    )  # fmt: skip
    assert res.exit_code == 5, res.output
    assert "accuracy gate failed (runtime numerics)" in res.output and "fake-quant, not judged" in res.output
    ok = cli(
        "quantize", "--checkpoint", tiny_checkpoint, "--weights", "int4_awq", "--out", tmp_path / "p", *args,
        "--min-top1-agreement", f"{dq - 0.01:.6f}", "--max-rel-logit-error", "10", "--max-ppl-increase", "10",
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert f"top-1 {dq:.4f}" in ok.output and "[runtime " in ok.output
    assert f"(fake-quant, not judged: top-1 {fake:.4f})" in ok.output


@pytest.mark.parametrize(
    ("top1", "phrase"),
    [
        (0.6968, "top-1 agreement 0.6968 < 0.7000"),  # the figure: once printed "0.70 < 0.7"
        (0.69999, "top-1 agreement 0.69999 < 0.70000"),  # digits enough to show the two differ
    ],
)
def test_gate_message_rounds_nothing_that_decides(top1: float, phrase: str) -> None:
    acc = Accuracy("dequant", 0.01, top1, 10.0, 10.0, 100)
    assert failures(acc, AccuracyGate(min_top1_agreement=0.7)) == [phrase]
    assert failures(Accuracy("dequant", 0.01, 0.7, 10.0, 10.0, 100), AccuracyGate(min_top1_agreement=0.7)) == []


def test_perplexity_and_logit_error_show_their_margin() -> None:
    acc = Accuracy("dequant", 0.20004, 0.9, 10.0, 11.0004, 100)
    fails = failures(acc, AccuracyGate(max_rel_logit_error=0.2, max_ppl_increase=0.1))
    assert fails == ["relative logit error 0.20004 > 0.20000", "perplexity +10.004% > +10.000%"]
