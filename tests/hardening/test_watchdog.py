"""The watchdog between `toolchain serve` and tritonserver reports the server's own exit status, even when
the server exits between its two waits (measured before: a crash collected by the orphan reaper was
reported as exit 0, so `serve` exited 0 after tritonserver died)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import alive
from toolchain import watchdog

# Runs the watchdog in a child interpreter whose first wait on the server sees it still running, then
# sleeps until the server has exited: the orphan reaper is the one that collects it.
RACE = textwrap.dedent(
    """
    import os, sys, time
    from toolchain import watchdog

    real = os.waitpid
    first = {"done": False}

    def waitpid(pid, options):
        if pid > 0 and not first["done"]:
            first["done"] = True
            time.sleep(1.0)  # the server exits meanwhile
            return 0, 0
        return real(pid, options)

    os.waitpid = waitpid
    sys.exit(watchdog.main(["--parent", str(os.getppid()), "--", sys.executable, "-c", "raise SystemExit(3)"]))
    """
)


def _run(code: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # its own session, as `serve` starts it: the watchdog stops its whole process group at the end
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=60, start_new_session=True).returncode


@pytest.mark.slow
def test_a_server_collected_by_the_reaper_keeps_its_exit_code() -> None:
    assert _run(RACE) == 3


def test_exit_codes_pass_through() -> None:
    for rc in (0, 3):
        code = (
            "import os, sys\nfrom toolchain import watchdog\n"
            "sys.exit(watchdog.main(['--parent', str(os.getppid()), '--', sys.executable, '-c',"
            f" 'raise SystemExit({rc})']))"
        )
        assert _run(code) == rc


# The server stand-in: like the Python-backend stubs (and a tritonserver busy with a graceful shutdown) it ignores
# SIGTERM; it forks a child that does too, opens a shared-memory region under its prefix, then reports the pids.
SERVER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stub = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
    open(sys.argv[1], "w").write(f"{os.getpid()} {stub.pid}")
    time.sleep(120)
    """
)
# The watchdog as `python -m toolchain.watchdog` runs it, with its stop grace for a server asked to stop
# (GRACE_S, 10 s) raised to an hour: a watchdog that gave the server that grace after its parent died would keep
# the tree for an hour, one that takes the orphan grace (PARENT_GONE_GRACE_S, 1 s) ends it in about a second.
WATCHDOG = textwrap.dedent(
    """
    import sys
    from toolchain import watchdog
    watchdog.GRACE_S = 3600.0
    sys.exit(watchdog.main(sys.argv[1:]))
    """
)
# `serve` stand-in: starts the watchdog as the server module does (its own session), then waits to be killed.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    pids, shm = sys.argv[1], sys.argv[2]
    cmd = [sys.executable, "-c", sys.argv[4], "--parent", str(os.getpid())]
    cmd += ["--shm-prefix", shm] if shm else []
    w = subprocess.Popen([*cmd, "--", sys.executable, "-c", sys.argv[3], pids], start_new_session=True)
    open(pids + ".watchdog", "w").write(str(w.pid))
    time.sleep(120)
    """
)


def _kill_parent_and_time_the_tree(tmp_path: Path, shm_prefix: str = "") -> float:
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pids), shm_prefix, SERVER, WATCHDOG], env=env)
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not (pids.is_file() and pids.read_text() and Path(f"{pids}.watchdog").is_file()):
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        tree = [int(Path(f"{pids}.watchdog").read_text()), *map(int, pids.read_text().split())]
        assert all(alive(p) for p in tree)
        t0 = time.monotonic()
        parent.kill()
        parent.wait(10)
        while any(alive(p) for p in tree) and time.monotonic() - t0 < 2 * GONE_WITHIN_S:
            time.sleep(0.02)
        return time.monotonic() - t0
    finally:
        for p in tree:
            if alive(p):
                os.kill(p, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


# A ceiling far from both: 60 times the 1 s orphan grace (a loaded two-core machine stretches it to 3 to 4 s), 60
# times below the hour of the raised stop grace. It holds which grace the watchdog chose, not how fast the machine is.
GONE_WITHIN_S = 60.0


@pytest.mark.slow
def test_the_tree_is_gone_before_the_full_stop_grace_after_the_parents_sigkill(tmp_path: Path) -> None:
    """Measured before: the watchdog gave a server that ignores SIGTERM its full 10 s stop grace (with the real
    tritonserver, 4.8 to 10.7 s) although nobody was left to wait for a graceful exit."""
    took = _kill_parent_and_time_the_tree(tmp_path)
    assert took < GONE_WITHIN_S, f"the server tree outlived its parent by {took:.2f} s: the full stop grace"


@pytest.mark.slow
def test_the_shared_memory_regions_go_with_the_tree(tmp_path: Path) -> None:
    """The Python backend's regions (tritonserver's shm-region-prefix-name) of a server killed before its own
    cleanup are removed by the watchdog; another prefix's are left alone."""
    if not os.path.isdir(watchdog.SHM_DIR):
        pytest.skip("no /dev/shm")
    prefix = f"tctest{os.getpid()}x{time.monotonic_ns()}_"
    mine, other = Path(watchdog.SHM_DIR) / f"{prefix}region0", Path(watchdog.SHM_DIR) / f"x{prefix}other"
    mine.write_bytes(b"\0" * 16)
    other.write_bytes(b"\0" * 16)
    try:
        assert _kill_parent_and_time_the_tree(tmp_path, prefix) < GONE_WITHIN_S
        deadline = time.monotonic() + 5
        while mine.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not mine.exists()
        assert other.exists()
    finally:
        for f in (mine, other):
            f.unlink(missing_ok=True)


def test_a_malformed_command_line_is_refused() -> None:
    for argv in (["--parent", "x", "--", "true"], ["--parent", "1"], ["--bogus", "1", "--", "true"], ["--", "true"]):
        assert watchdog.main(argv) == 2
