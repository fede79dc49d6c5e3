"""Keep a server's process tree tied to the process that started it.

``python -m toolchain.triton.watchdog --parent PID -- CMD...`` runs CMD (tritonserver, or mpirun) and:

- dies with its parent: ``PR_SET_PDEATHSIG`` (Linux ``prctl(2)``) sends it SIGTERM when ``toolchain serve``
  (or whatever started it) exits, even by SIGKILL; it then stops the whole tree;
- takes the tree's orphans: it is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so Python-backend stubs
  whose tritonserver died are re-parented to it instead of init, and it kills them;
- stops the tree as one process group (SIGTERM, a grace period, then SIGKILL) and exits as CMD did.

It is started in a new session, so CMD and everything CMD forks (the stubs) share its process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 10.0


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _reap(keep: int | None = None) -> int | None:
    """Collect every exited child (adopted orphans included) so none stays a zombie; the wait status of
    ``keep`` (the server) when this call collected it, so its exit code is never lost."""
    kept = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return kept
        if pid == 0:
            return kept
        if pid == keep:
            kept = status


def _stop_group(grace: float) -> None:
    """SIGTERM every other process of this group (and adopted orphans), wait up to ``grace``, then SIGKILL."""
    pgid = os.getpgrp()
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group signal must not stop us first
    try:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        for pid in _group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _others_alive(pgid):
            _reap()
            time.sleep(0.1)
        _reap()
        if _others_alive(pgid):
            for pid in _group_members(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
            _reap()
    finally:
        signal.signal(signal.SIGTERM, old)


def _group_members(pgid: int) -> list[int]:
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # fields after the command: state, ppid, pgrp, ...; zombies are already dead. Orphans adopted
        # from the server (ppid == us) count even if they left the group.
        if (int(stat[2]) == pgid or int(stat[1]) == me) and stat[0] != b"Z":
            out.append(int(name))
    return out


def _others_alive(pgid: int) -> bool:
    return bool(_group_members(pgid))


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--parent" or argv[2] != "--":
        sys.stderr.write("usage: python -m toolchain.triton.watchdog --parent PID -- CMD...\n")
        return 2
    parent = int(argv[1])
    cmd = argv[3:]
    stop = {"sig": 0}

    def on_signal(sig: int, _frame: object) -> None:
        stop["sig"] = sig

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 128 + signal.SIGTERM
    child = subprocess.Popen(cmd)  # stdout/stderr inherited: the server log
    code: int | None = None
    while code is None and not stop["sig"]:
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:  # collected elsewhere without its status: never report that as success
            pid, status = child.pid, 1 << 8
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            break
        reaped = _reap(keep=child.pid)  # the server may exit between the two waits: keep its status
        if reaped is not None:
            code = os.waitstatus_to_exitcode(reaped)
            break
        time.sleep(0.1)
    _stop_group(GRACE_S if code is None else 0.5)  # the server's own stubs go with it
    if code is None:
        code = -stop["sig"]
    if code < 0:  # die of the same signal, so the caller sees what happened to the server
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
