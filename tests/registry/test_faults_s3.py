"""SIGKILL during a push to S3 (a real moto server): the registry serves a whole entry or none, never a
corrupt one, and gc removes what the killed pushes left."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from toolchain.registry import open_registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
KEY = "e" * 64


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_sigkill_during_s3_push(s3_env: str, tmp_path: Path) -> None:
    import boto3

    bucket = f"kill-{os.getpid()}-{abs(hash(tmp_path)) % 10**8}"
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=bucket)
    reg = f"s3://{bucket}/engines"
    src = tmp_path / "engine"
    src.mkdir()
    rng = random.Random(3)
    for i in range(6):
        (src / f"rank{i}.engine").write_bytes(rng.randbytes(2 * 2**20))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "toolchain.cli.main", "cache", "push", str(src), "--key", KEY, "--registry", reg]
    for i in range(3):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        r = open_registry(reg)
        assert r.verify().corrupt == {}
        if r.exists(KEY):
            r.get(KEY, tmp_path / f"o{i}")
            assert _tree(tmp_path / f"o{i}") == _tree(src)
            r.backend.delete(f"manifests/{KEY}.json")
    r = open_registry(reg)
    r.gc(r.gc_plan(grace_s=0))
    assert list(r.backend.list("blobs/")) == []
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False).returncode == 0
    r.get(KEY, tmp_path / "final")
    assert _tree(tmp_path / "final") == _tree(src)
