"""`triton emit` from an installed wheel: the Python-backend model sources ship as package data."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    for d in ("toolchain", "triton_repo"):
        subprocess.run(["cp", "-r", str(ROOT / d), str(src / d)], check=True)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return next(out.glob("toolchain-*.whl"))


def test_wheel_carries_every_model_source(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls", "tensorrt_llm_cpu_reference", "llmapi"):
        assert f"toolchain/triton_repo/{model}/1/model.py" in names, model
    assert "toolchain/triton/data/inflight_batcher_llm_1.1_parameters.json" in names  # what `triton lint` checks


def test_emit_from_the_installed_wheel(wheel: Path, tmp_path: Path, tiny_spec: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import sys, toolchain\n"
        f"assert toolchain.__file__.startswith({str(site)!r}), toolchain.__file__\n"
        "from toolchain.cli.main import run\n"
        "sys.argv = ['toolchain', *sys.argv[1:]]\n"
        "run()\n"
    )
    out = tmp_path / "repo"
    r = subprocess.run(
        [sys.executable, "-c", code, "triton", "emit", str(tiny_spec), "--engine", "reference", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls", "tensorrt_llm"):
        assert (out / model / "1" / "model.py").is_file(), model
