"""A pull killed with SIGKILL leaves its hidden ``.DEST.partial.*`` directory behind (it cannot clean up); the next
run towards the same destination removes it, and never removes the staging directory of a pull still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import SLOW_PULL as _SLOW_PULL
from toolchain.registry import open_registry

K1 = "1" * 64
REPO = Path(__file__).resolve().parents[2]


def _partials(dest: Path) -> list[Path]:
    return sorted(p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}."))


def _start_slow_pull(reg: str, dest: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_PULL, reg, K1, str(dest)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # bounded: the child prints after its first file or exits
    assert line.strip() == "landed", f"the slow pull did not start: {line!r} rc={proc.poll()}"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL  # the kill landed mid-pull, not after it ended


@pytest.fixture
def local_reg(tmp_path: Path, engine_dir: Path) -> str:
    reg = str(tmp_path / "registry")
    open_registry(reg).put(K1, engine_dir)
    return reg


def test_next_pull_removes_what_a_killed_pull_left(local_reg: str, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    _kill(_start_slow_pull(local_reg, dest))
    first = _partials(dest)
    assert len(first) == 1 and ".partial." in first[0].name and any(first[0].iterdir())
    _kill(_start_slow_pull(local_reg, dest))  # the second killed pull removed the first one's leftover
    left = _partials(dest)
    assert len(left) == 1 and left != first and any(left[0].iterdir())
    assert not dest.exists()

    r = subprocess.run(
        [sys.executable, "-m", "toolchain.cli.main", "cache", "pull", K1, str(dest), "--registry", local_reg],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    assert (dest / "rank0.engine").is_file()
    assert _partials(dest) == []  # the leftovers are gone, and the pull left none of its own


@pytest.mark.slow
def test_a_running_pull_keeps_its_staging_directory(local_reg: str, tmp_path: Path, engine_dir: Path) -> None:
    from toolchain.digest import sweep_staged

    dest = tmp_path / "out"
    proc = _start_slow_pull(local_reg, dest)
    try:
        live = _partials(dest)
        assert len(live) == 1
        assert sweep_staged(dest) == 0 and _partials(dest) == live  # locked by a live process: kept
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:  # still the same live pull
            assert live[0].is_dir()
            time.sleep(0.5)
    finally:
        _kill(proc)
    assert sweep_staged(dest) == 1 and _partials(dest) == []


def test_sweep_leaves_lookalike_names_alone(tmp_path: Path) -> None:
    from toolchain.digest import sweep_staged

    dest = tmp_path / "out"
    keep = [tmp_path / ".out.partial.mine", tmp_path / ".other.partial.abcd1234", tmp_path / "out.partial.abcd1234"]
    for k in keep:
        k.mkdir()
    assert sweep_staged(dest) == 0 and all(k.is_dir() for k in keep)
