"""Every benchmark script runs in quick mode and prints its ratios, so none of them can rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # every script runs for real, seconds to a minute each

QUICK = {
    "cli_help_bench.py": ["ratio"],
    "registry_bench.py": ["push: read 1.0", "hashing", "S3 get"],
    "matrix_bench.py": ["spec expand", "matrix --registry s3://", "build --all --dry-run"],
    "quantize_bench.py": ["peak RSS", "wall", "byte-identical"],
    "loadgen_bench.py": ["chunks per client CPU-second", "wall-clock chunks/s", "TTFT accuracy"],
    "oci_bench.py": ["OCI push: toolchain", "OCI pull: toolchain", "OCI/S3", "1 from one that did"],  # record blob
    "aic_estimate_bench.py": ["agree within 1 %: yes", "floor never above the estimate: yes", "estimate ÷ floor"],
}


def test_every_script_is_covered() -> None:
    scripts = {p.name for p in (REPO / "benchmarks").glob("*_bench.py")}
    assert scripts == set(QUICK)


@pytest.mark.parametrize("script", QUICK)
def test_quick_mode_runs_and_reports(script: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path))
    r = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for want in QUICK[script]:
        assert want in r.stdout, r.stdout
