"""proc.run_logged: the deadline fires on a clock, also for a child that prints nothing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.helpers import alive, wait_for
from toolchain.proc import run_logged


@pytest.mark.slow
def test_silent_child_killed_at_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = run_logged([sys.executable, "-c", "import time; time.sleep(3600)"], tmp_path / "log", timeout=1.0)
    took = time.monotonic() - t0
    assert res.returncode == -9
    # the property: killed at the 1 s deadline, not when the child's hour of sleep ends; the ceiling is 30
    # deadlines, so a loaded two-core machine cannot miss it, and 120 times below the child's own end
    assert 0.9 <= took < 30.0, took
    assert "killed after 1 s timeout" in (tmp_path / "log").read_text()


@pytest.mark.slow
def test_silent_group_killed_even_when_term_is_ignored(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(3600)\n"
    )
    t0 = time.monotonic()
    res = run_logged([sys.executable, "-c", script], tmp_path / "log", timeout=1.5)
    took = time.monotonic() - t0
    assert res.returncode == -9
    assert took < 30.0, took  # the 1.5 s deadline fired although SIGTERM is ignored (the child sleeps an hour)
    grandchild = int(pidfile.read_text())
    assert wait_for(lambda: not alive(grandchild), 30), "the grandchild in the process group survived"


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


def test_capture_keeps_output_and_code_and_names_a_missing_binary() -> None:
    from toolchain.proc import capture

    code = "import sys; print(input()); sys.stderr.write('e'); sys.exit(4)"
    r = capture([sys.executable, "-c", code], timeout=60, input="hi\n")
    assert (r.returncode, r.stdout, r.stderr, r.ok) == (4, "hi\n", "e", False)
    r = capture(["no-such-binary-toolchain-test"], timeout=60)
    assert r.returncode is None and r.error is not None and "could not start" in r.error


@pytest.mark.timeout(60)
def test_capture_at_its_deadline_returns_even_when_a_grandchild_holds_the_pipes() -> None:
    """The child is killed at the deadline; a grandchild that inherited its stdout must not keep capture waiting
    (the pytest timeout is the bound, not a clock in the test)."""
    from toolchain.proc import capture

    r = capture(["sh", "-c", "echo started; sleep 100 & wait"], timeout=1)
    assert r.timed_out and r.returncode is None and r.error is not None and "no answer within 1 s" in r.error
