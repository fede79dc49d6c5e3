"""`dynamo deploy` refuses when the workers would not serve what the plan assumed (issue 46; it warned, issue 32
item 8), and gives a gated Hub model its token from Dynamo's named Secret."""

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


def test_a_quantized_plan_without_its_artifact_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Without --engine the workers would serve the Hub model unquantized, which the pools were not sized for
    (issue 46: it exited 0 with a warning and served BF16)."""
    for verb in (("dynamo", "deploy"), ("deploy",)):
        out = tmp_path / "-".join(verb)
        r = cli(*verb, DISAGG, "--out", out)
        assert r.exit_code == 2, r.output
        (line,) = [ln for ln in r.output.splitlines() if ln.strip()]
        assert line.startswith("Error: the plan sized the pools for fp8 weights"), line
        assert "--engine KEY of the spec's quantized LLM-API bundle" in line and "--model-path" in line
        assert not out.exists()


@pytest.mark.slow
def test_allow_unquantized_writes_the_hub_model_warned_and_with_the_token_secret(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    out = tmp_path / "out"
    r = cli("dynamo", "deploy", DISAGG, "--out", out, "--allow-unquantized")
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.output.splitlines() if ln.startswith("warning: ")]
    assert len(warn) == 1 and "fp8 weights" in warn[0] and "--allow-unquantized" in warn[0], r.output
    for res in render_kustomization(out):
        validate_manifest(res)
    for c in _workers(out):
        assert c["envFrom"] == [{"secretRef": {"name": "hf-token-secret", "optional": True}}]


def test_a_quantized_checkpoint_path_is_not_refused(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli("dynamo", "deploy", DISAGG, "--out", out, "--model-path", "/models/llama-70b-fp8/hf")
    assert r.exit_code == 0, r.output
    assert "warning:" not in r.output


@pytest.mark.slow
def test_the_quantized_artifact_is_not_warned_about(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli(
        "dynamo", "deploy", DISAGG, "--out", out, "--engine", KEY, "--registry", "s3://models/llm",
        "--toolchain-image", "registry.example/toolchain@sha256:" + "0" * 64,
        "--engine-digest", "sha256:" + "1" * 64,  # pinned: no registry to read here, and nothing else to warn about
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "warning:" not in r.output
    for c in _workers(out):
        assert "envFrom" not in c or all(e["secretRef"]["name"] != "hf-token-secret" for e in c["envFrom"])
