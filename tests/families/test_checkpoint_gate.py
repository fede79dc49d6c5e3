"""`toolchain quantize --checkpoint`: explicit thresholds gate the result; without them, figures worse than
the spec defaults are said, never passed over silently with exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from tests.conftest import SPECS, Cli
from toolchain.specs import models

pytestmark = pytest.mark.slow
FAST = ("--calib-samples", "4", "--calib-seq-len", "16")


def test_explicit_thresholds_gate_checkpoint_mode(cli: Cli, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    res = cli(
        "quantize", "--checkpoint", tiny_checkpoint, "--weights", "fp8", "--out", out, *FAST,
        "--min-top1-agreement", "0.999", "--max-rel-logit-error", "0.000001",
    )  # fmt: skip
    assert res.exit_code == 5, res.output
    assert "accuracy gate failed" in res.output and "relative logit error" in res.output
    assert not out.exists()  # a checkpoint that failed its gate is not left behind


def test_thresholds_belong_to_the_spec_in_spec_mode(cli: Cli, tmp_path: Path) -> None:
    res = cli("quantize", SPECS / "tiny.yaml", "--max-ppl-increase", "0.1")
    assert res.exit_code == 2 and "quantization.accuracy" in res.output


def test_ungated_checkpoint_mode_says_what_is_worse_than_the_defaults(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Strict(models.AccuracyGate):  # defaults no quantized model meets
        max_rel_logit_error: float = Field(1e-6, gt=0)
        min_top1_agreement: float = Field(1.0, ge=0, le=1)

    monkeypatch.setattr(models, "AccuracyGate", Strict)
    res = cli("quantize", "--checkpoint", tiny_checkpoint, "--weights", "fp8", "--out", tmp_path / "q", *FAST)
    assert res.exit_code == 0, res.output
    assert "warning: not gated, and worse than the spec defaults: relative logit error" in res.output
    assert "--max-rel-logit-error" in res.output
