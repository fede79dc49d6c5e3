"""proc.run_logged: the deadline fires on a clock, also for a child that prints nothing."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from toolchain.proc import run_logged


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_silent_child_killed_at_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = run_logged([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log", timeout=1.0)
    took = time.monotonic() - t0
    assert res.returncode == -9
    # the property: killed at the deadline, not when the child's 60 s sleep ends (a ceiling far from both, so a
    # loaded two-core machine cannot miss it)
    assert 0.9 <= took < 30.0, took
    assert "killed after 1 s timeout" in (tmp_path / "log").read_text()


@pytest.mark.slow
def test_silent_group_killed_even_when_term_is_ignored(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = run_logged([sys.executable, "-c", script], tmp_path / "log", timeout=1.5)
    took = time.monotonic() - t0
    assert res.returncode == -9
    assert took < 30.0, took  # the deadline fired although SIGTERM is ignored (the child sleeps 60 s)
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild), "the grandchild in the process group survived"


def test_output_lines_and_exit_code_kept(tmp_path: Path) -> None:
    lines: list[str] = []
    res = run_logged(
        [sys.executable, "-c", "import sys; print('a'); print('b', flush=True); sys.stdout.write('c'); sys.exit(3)"],
        tmp_path / "log",
        timeout=30,
        on_line=lines.append,
    )
    assert res.returncode == 3
    assert lines == ["a", "b", "c"]
    assert (tmp_path / "log").read_text().endswith("a\nb\nc")
