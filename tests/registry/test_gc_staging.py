"""Issue 47 (D): a `cache pull` killed with SIGKILL leaves its ``.DEST.partial.*`` staging directory; the pull
journaled where it staged (``$TOOLCHAIN_CACHE/staging/``), so `toolchain cache gc` finds and removes it, wherever
DEST was, while a staging directory a live pull holds (flock) is kept. The real destination, other pulls' results
and the registry are untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, Cli
from tests.helpers import SLOW_PULL as _SLOW_PULL
from toolchain.artifacts.layout import cache
from toolchain.digest import staging_journal
from toolchain.registry import open_registry

KEY = "5" * 64


def _partials(dest: Path) -> list[Path]:
    return sorted(p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.partial."))


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}  # TOOLCHAIN_CACHE: this test's (conftest), as gc's below


def _kill_when_staging_exists(proc: subprocess.Popen[bytes], dest: Path, limit_s: float = 120.0) -> Path:
    """Poll for the pull's staging directory (with a file in it), then SIGKILL the pull; the directory."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = _partials(dest)
        if found and any(found[0].iterdir()):
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
            assert proc.returncode == -signal.SIGKILL, "the pull ended before the kill: make the entry larger"
            return found[0]
        assert proc.poll() is None, f"the pull ended (rc {proc.returncode}) before its staging directory appeared"
        time.sleep(0.002)
    proc.kill()
    raise AssertionError(f"no staging directory beside {dest} within {limit_s:g} s")


def _gc(cli: Cli, registry: str, *extra: str) -> dict[str, object]:
    r = cli("cache", "gc", "--registry", registry, "--json", *extra)
    assert r.exit_code == 0, r.output
    doc: dict[str, object] = json.loads(r.stdout)
    return doc


@pytest.fixture
def big_entry(tmp_path: Path) -> Path:
    d = tmp_path / "big"
    d.mkdir()
    (d / "config.json").write_text('{"build_config": {"max_batch_size": 8}}')
    for i in range(4):  # 64 MiB: a pull over HTTP takes long enough to be caught half-way
        (d / f"rank{i}.engine").write_bytes(os.urandom(16 * 2**20))
    return d


@pytest.mark.slow
def test_gc_removes_what_a_killed_oci_pull_left_and_nothing_else(
    oci_url: str, big_entry: Path, tmp_path: Path, cli: Cli
) -> None:
    reg = open_registry(oci_url)
    reg.put(KEY, big_entry)
    done = tmp_path / "pulled" / "done"
    reg.get(KEY, done)  # a finished pull beside the killed one: gc must not touch it
    sentinel = tmp_path / "pulled" / "notes.txt"
    sentinel.write_text("mine")
    dest = tmp_path / "pulled" / "engine"

    proc = subprocess.Popen(
        [sys.executable, "-m", "toolchain.cli.main", "cache", "pull", KEY, str(dest), "--registry", oci_url],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    staging = _kill_when_staging_exists(proc, dest)
    assert staging.is_dir() and not dest.exists()
    assert cache().staging_entry(staging.resolve()).is_file(), "the pull journaled nothing (or not where the map says)"
    assert cache().staging_entry(staging).parent == staging_journal()

    plan = _gc(cli, oci_url, "--dry-run")
    assert plan["staging"] == 1 and staging.is_dir()  # --dry-run: planned, not removed
    assert _gc(cli, oci_url, "--yes")["staging"] == 1

    assert not staging.exists() and _partials(dest) == []
    assert not dest.exists() and sentinel.read_text() == "mine"
    assert _tree(done) == _tree(big_entry)
    assert list(staging_journal().glob("*.path")) == []
    assert reg.verify().corrupt == {}
    reg.get(KEY, dest)  # the registry is whole: the pull succeeds now
    assert _tree(dest) == _tree(big_entry)


@pytest.mark.slow
def test_gc_keeps_a_live_pulls_staging_and_removes_it_once_killed(tmp_path: Path, engine_dir: Path, cli: Cli) -> None:
    registry = str(tmp_path / "registry")
    open_registry(registry).put(KEY, engine_dir)
    dest = tmp_path / "elsewhere" / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_PULL, registry, KEY, str(dest)], stdout=subprocess.PIPE, env=_env()
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"landed"
        (live,) = _partials(dest)
        assert _gc(cli, registry, "--yes")["staging"] == 0 and live.is_dir()  # held by a live pull: kept
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    assert _gc(cli, registry, "--yes")["staging"] == 1
    assert not live.exists() and not dest.exists()
    assert open_registry(registry).verify().corrupt == {}


def test_gc_never_follows_a_journal_entry_that_names_no_staging_directory(tmp_path: Path, cli: Cli) -> None:
    from toolchain.digest import sha256_text

    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "f").write_text("x")
    journal = staging_journal()
    journal.mkdir(parents=True)
    for text in (str(keep), str(tmp_path / ".x.partial.abcd1234" / ".." / "precious"), "relative/.x.partial.abcd1234"):
        (journal / f"{sha256_text(text)[:32]}.path").write_text(text)
    (journal / "0000.path").write_bytes(b"\xff\xfe")
    registry = str(tmp_path / "registry")
    open_registry(registry).put(KEY, keep)
    assert _gc(cli, registry, "--yes")["staging"] == 0
    assert (keep / "f").read_text() == "x" and (tmp_path / "registry").is_dir()  # what they name is kept
