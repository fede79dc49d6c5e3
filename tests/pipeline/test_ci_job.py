"""scripts/ci-gpu-job.sh against a simulated NVIDIA container: the image's Python with a `tensorrt_llm` of
the pinned version in its site-packages, stand-in trtllm-build and converter on PATH."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, SPECS
from toolchain.registry import open_registry

FAKES = REPO / "tests" / "fakes"
pytestmark = pytest.mark.slow


@pytest.fixture
def image(tmp_path: Path) -> dict[str, str]:
    """The container: /usr/bin/python3 (here a wrapper) whose site-packages hold tensorrt_llm 1.2.1."""
    site = tmp_path / "image" / "site-packages"
    for pkg, version in (("tensorrt_llm", "1.2.1"), ("tensorrt", "10.14.1.48")):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    py = tmp_path / "image" / "bin" / "python3"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexport PYTHONPATH="{site}:{REPO}"\nexec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for script in ("ci-gpu-job.sh", "ci-aws-web-identity.sh"):  # the job sources the credentials helper
        shutil.copy2(REPO / "scripts" / script, checkout / "scripts" / script)
    env = {
        "PATH": f"{FAKES / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "PYTHON": str(py),
        "TRTLLM_ROOT": str(FAKES / "trtllm_root"),
        "TOOLCHAIN_REGISTRY": str(tmp_path / "registry"),
    }
    return {**env, "CHECKOUT": str(checkout)}


def _job(image: dict[str, str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in image.items() if k != "CHECKOUT"} | env
    script = Path(image["CHECKOUT"]) / "scripts" / "ci-gpu-job.sh"
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=e, timeout=300)


def test_job_uses_the_images_python_and_its_tensorrt_llm(image: dict[str, str]) -> None:
    r = _job(image, "check")
    assert r.returncode == 0, r.stderr
    assert "TensorRT-LLM 1.2.1" in r.stderr and "installing" not in r.stderr
    assert f"logs in {image['CHECKOUT']}/.toolchain-cache/logs" in r.stderr


def test_empty_registry_is_refused(image: dict[str, str]) -> None:
    r = _job(image, "check", TOOLCHAIN_REGISTRY="")
    assert r.returncode == 2
    assert r.stderr.startswith("Error: TOOLCHAIN_REGISTRY is empty — ")


def test_an_interpreter_without_tensorrt_llm_is_named(image: dict[str, str], tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexport PYTHONPATH="{REPO}"\nexec "{sys.executable}" "$@"\n')
    bare.chmod(0o755)
    r = _job(image, "check", PYTHON=str(bare))
    assert r.returncode == 2 and "cannot import tensorrt_llm" in r.stderr


def test_build_job_publishes_and_leaves_its_log_where_ci_uploads_it(
    image: dict[str, str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(tiny_checkpoint)
    d["quantization"].update(weights="bf16", kv_cache="auto")
    spec = tmp_path / "tiny-bf16.yaml"
    spec.write_text(yaml.safe_dump(d))
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    cell = expand(load_spec(spec))[0]
    r = _job(image, "build", str(spec), cell.id)
    assert r.returncode == 0, r.stdout + r.stderr
    logs = list((Path(image["CHECKOUT"]) / ".toolchain-cache" / "logs").glob("build-*.log"))
    assert logs and "Engine built successfully" in logs[0].read_text()
    from toolchain.artifacts.cell import for_cell

    key = for_cell(cell).engine_key
    assert key and open_registry(image["TOOLCHAIN_REGISTRY"]).exists(key)
    again = _job(image, "build", str(spec), cell.id)
    assert again.returncode == 0 and "cached" in (again.stdout + again.stderr)
