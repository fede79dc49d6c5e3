"""`dynamo deploy` says when the workers would not serve what the plan assumed, and gives a gated Hub model its
token from Dynamo's named Secret (issue 32, item 8)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from tests.deploy.conftest import render_kustomization

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
KEY = "ab" * 32


def _workers(out: Path) -> list[dict[str, Any]]:
    d = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return [c["podTemplate"]["spec"]["containers"][0] for c in d["spec"]["components"][1:]]


@pytest.mark.slow
def test_hub_model_for_a_quantized_plan_is_warned_and_gets_the_token_secret(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    out = tmp_path / "out"
    r = cli("dynamo", "deploy", DISAGG, "--out", out)
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.output.splitlines() if ln.startswith("warning: ")]
    assert len(warn) == 1 and "fp8 weights" in warn[0] and "--engine KEY" in warn[0], r.output
    for res in render_kustomization(out):
        validate_manifest(res)
    for c in _workers(out):
        assert c["envFrom"] == [{"secretRef": {"name": "hf-token-secret", "optional": True}}]


@pytest.mark.slow
def test_the_quantized_artifact_is_not_warned_about(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli(
        "dynamo", "deploy", DISAGG, "--out", out, "--engine", KEY, "--registry", "s3://models/llm",
        "--toolchain-image", "registry.example/toolchain@sha256:" + "0" * 64,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "warning:" not in r.output
    for c in _workers(out):
        assert "envFrom" not in c or all(e["secretRef"]["name"] != "hf-token-secret" for e in c["envFrom"])
