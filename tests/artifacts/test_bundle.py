"""The PyTorch runtime's warm-start bundle: made for one GPU, TensorRT-LLM and shape, and never handed to a
runtime on anything else (TensorRT-LLM itself loads an autotuner file without checking)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import SPECS, Cli
from toolchain.artifacts import bundle as B
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand

H100 = "NVIDIA H100 80GB HBM3"


def _cell() -> Cell:
    return expand(load_spec(SPECS / "llama-3.1-8b-fp8.yaml"))[0]


def _warm(tmp_path: Path) -> tuple[Path, B.MadeFor]:
    cell = _cell()
    d = tmp_path / "bundle"
    (d / "caches").mkdir(parents=True)
    (d / "caches" / "autotuner.cache").write_text("{}")
    (d / B.MANIFEST).write_text(json.dumps(B.manifest(cell, warm=True, caches=["caches/autotuner.cache"])))
    return d, B.made_for(cell)


def test_a_cold_bundle_says_it_is_cold_and_hands_nothing(tmp_path: Path) -> None:
    cell = _cell()
    (tmp_path / B.MANIFEST).write_text(json.dumps(B.manifest(cell, warm=False)))
    got = B.accept(tmp_path, B.made_for(cell))
    assert got.env == {} and got.state == "cold" and got.warning is None
    assert "cold start" in got.line()


def test_a_warm_bundle_fits_only_what_it_was_made_for(tmp_path: Path) -> None:
    d, made = _warm(tmp_path)
    assert made.gpu == H100 and made.trtllm_version == "1.2.1"
    ok = B.accept(d, made)
    assert ok.state == "warm" and ok.env == {"TLLM_AUTOTUNER_CACHE_PATH": str(d / "caches" / "autotuner.cache")}
    for other, why in (
        (B.MadeFor("NVIDIA H200", made.trtllm_version, made.shape), "made on NVIDIA H100"),
        (B.MadeFor(made.gpu, "1.3.0rc29", made.shape), "made with TensorRT-LLM 1.2.1"),
        (B.MadeFor(made.gpu, made.trtllm_version, {**made.shape, "max_batch_size": 1}), "made for shape"),
    ):
        got = B.accept(d, other)
        assert got.env == {} and got.state == "cold"
        assert got.warning is not None and got.warning.startswith("warning: cold start") and why in got.warning


def test_the_bundle_command_quarantines_a_bundle_made_for_another_gpu(tmp_path: Path) -> None:
    """The Dynamo worker's init container: the runtime is pointed at caches/, so a refused bundle's caches
    are moved aside in the pod's copy and the worker starts cold."""
    d, made = _warm(tmp_path)
    cmd = [sys.executable, "-m", "toolchain.artifacts.bundle", str(d), "--trtllm", made.trtllm_version]
    same = subprocess.run([*cmd, "--gpu", made.gpu], capture_output=True, text=True, check=True)
    assert same.stdout.strip() == f"export TLLM_AUTOTUNER_CACHE_PATH={d / 'caches' / 'autotuner.cache'}"
    other = subprocess.run([*cmd, "--gpu", "NVIDIA B200", "--quarantine"], capture_output=True, text=True)
    assert other.returncode == 0 and other.stdout == ""
    assert "warning: cold start" in other.stderr and "this GPU is NVIDIA B200" in other.stderr
    assert not (d / "caches").exists() and (d / "caches.refused" / "autotuner.cache").is_file()


def test_build_dry_run_lists_the_warm_up_and_the_cache_paths(cli: Cli) -> None:
    r = cli("build", SPECS / "llama-3.1-8b-fp8.yaml", "--all", "--dry-run")
    assert r.exit_code == 0, r.output
    for var, path in B.CACHE_ENV.items():
        assert f"{var}=<bundle>/{path}" in r.output
    assert "cold bundle: TensorRT-LLM is not installed here" in r.output
    assert f"warm-up: tensorrt_llm.LLM on {H100}, TensorRT-LLM 1.2.1" in r.output


def test_an_engine_cell_plans_no_bundle(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "engine.yaml"
    spec.write_text((SPECS / "tiny-engine.yaml").read_text().replace("../.work/tiny-llama", "hf://org/tiny@v1"))
    r = cli("build", spec, "--all", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "trtllm-build" in r.output and "TLLM_AUTOTUNER_CACHE_PATH" not in r.output
