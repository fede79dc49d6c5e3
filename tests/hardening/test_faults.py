"""Fault suite: SIGKILL during push and pull, gc during push, concurrent pushes, each through the real CLI in
its own process. After every fault the registry serves a complete entry or none, never a corrupt one, and gc
leaves nothing behind. (Parent killed: tests/serving/test_server_lifetime.py, with the real Triton.)"""

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

KEY = "f" * 64


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "toolchain.cli.main", *[str(a) for a in args]]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _start(*args: str | Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_cli(*args), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _run(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(*args), env=_env(), capture_output=True, text=True, timeout=timeout, check=False)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    d = tmp_path / "engine"
    d.mkdir()
    rng = random.Random(7)
    for i in range(4):
        (d / f"rank{i}.engine").write_bytes(rng.randbytes(6 * 2**20))
    (d / "config.json").write_text('{"build_config": {}}')
    return d


def _assert_whole_or_absent(reg: str, engine: Path, out: Path) -> None:
    r = open_registry(reg)
    assert r.verify().corrupt == {}
    if r.exists(KEY):
        r.get(KEY, out)
        assert _tree(out) == _tree(engine)


def test_sigkill_during_push_leaves_a_whole_entry_or_none(tmp_path: Path, engine: Path) -> None:
    reg = str(tmp_path / "reg")
    rng = random.Random(1)
    for i in range(4):
        p = _start("cache", "push", engine, "--key", KEY, "--registry", reg)
        time.sleep(rng.uniform(0.3, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        _assert_whole_or_absent(reg, engine, tmp_path / f"pulled{i}")
        if open_registry(reg).exists(KEY):
            open_registry(reg).backend.delete(f"manifests/{KEY}.json")  # next round starts without the entry
    res = _run("cache", "gc", "--yes", "--grace", "0", "--registry", reg)
    assert res.returncode == 0, res.stderr
    r = open_registry(reg)
    assert list(r.backend.list("tmp/")) == [] and list(r.backend.list("blobs/")) == []
    res = _run("cache", "push", engine, "--key", KEY, "--registry", reg)
    assert res.returncode == 0, res.stderr
    _assert_whole_or_absent(reg, engine, tmp_path / "final")
    assert (tmp_path / "final").is_dir()


def test_sigkill_during_pull_leaves_no_half_written_destination(tmp_path: Path, engine: Path) -> None:
    reg = str(tmp_path / "reg")
    assert _run("cache", "push", engine, "--key", KEY, "--registry", reg).returncode == 0
    rng = random.Random(2)
    for i in range(3):
        dest = tmp_path / f"out{i}"
        p = _start("cache", "pull", KEY, dest, "--registry", reg)
        time.sleep(rng.uniform(0.3, 2.0))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        assert not dest.exists() or _tree(dest) == _tree(engine)  # renamed into place only when complete
    assert open_registry(reg).verify().corrupt == {}
    res = _run("cache", "pull", KEY, tmp_path / "again", "--registry", reg)
    assert res.returncode == 0 and _tree(tmp_path / "again") == _tree(engine)


def test_gc_during_push_never_breaks_the_entry(tmp_path: Path, engine: Path) -> None:
    reg = str(tmp_path / "reg")
    open_registry(reg)  # the registry exists (gc refuses a path that holds none: a mistyped --registry)
    for i in range(2):
        push = _start("cache", "push", engine, "--key", KEY, "--registry", reg, "--force")
        gcs = 0
        while push.poll() is None:
            res = _run("cache", "gc", "--yes", "--grace", "0", "--registry", reg)
            assert res.returncode in (0, 1), res.stderr  # 1: the store was busy with the push
            gcs += 1
        assert push.returncode == 0, push.stderr.read() if push.stderr else ""
        assert gcs >= 1
        _assert_whole_or_absent(reg, engine, tmp_path / f"pulled{i}")
        assert (tmp_path / f"pulled{i}").is_dir()


def test_concurrent_pushes_of_one_key(tmp_path: Path, engine: Path) -> None:
    reg = str(tmp_path / "reg")
    other = tmp_path / "other"
    other.mkdir()
    (other / "rank0.engine").write_bytes(b"other content")
    procs = [_start("cache", "push", engine, "--key", KEY, "--registry", reg) for _ in range(3)]
    procs.append(_start("cache", "push", other, "--key", KEY, "--registry", reg))
    codes = [p.wait(120) for p in procs]
    assert codes[:3] == [0, 0, 0] or codes[3] == 0, codes
    assert sum(c == 0 for c in codes) in (1, 3), codes  # one content wins; the other is refused (exit 2)
    assert all(c in (0, 2) for c in codes), codes
    r = open_registry(reg)
    assert r.verify().corrupt == {} and r.keys() == [KEY]
