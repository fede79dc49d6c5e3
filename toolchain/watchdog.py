"""Keep a server's process tree tied to the process that started it.

``python -m toolchain.watchdog --parent PID [--shm-prefix NAME] -- CMD...`` runs CMD (tritonserver, or
mpirun) and:

- dies with its parent: ``PR_SET_PDEATHSIG`` (Linux ``prctl(2)``) sends it SIGTERM when ``toolchain serve``
  (or whatever started it) exits, even by SIGKILL; it then stops the whole tree at once (a second of grace, then
  SIGKILL: nobody is left to wait for Triton's graceful shutdown, which polls its unloading models once a second);
- takes the tree's orphans: it is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so Python-backend stubs
  whose tritonserver died are re-parented to it instead of init, and it kills them;
- stops the tree as one process group (SIGTERM, a grace period, then SIGKILL) and exits as CMD did;
- removes the Python backend's shared-memory regions (``/dev/shm/NAME*``, the ``shm-region-prefix-name`` given
  to tritonserver), which a server killed before its own cleanup leaves behind.

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
GRACE_S = 10.0  # asked to stop (by `serve` on Ctrl-C, or a signal): Triton may drain and unload
PARENT_GONE_GRACE_S = 1.0  # the parent died: nobody waits for a graceful exit
SHM_DIR = "/dev/shm"


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


def _remove_shm(prefix: str | None) -> None:
    """Unlink the shared-memory regions named ``prefix*`` (a plain file name prefix, never a path)."""
    if not prefix or "/" in prefix or prefix.startswith("."):
        return
    with contextlib.suppress(OSError):
        for name in os.listdir(SHM_DIR):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))


def _parse(argv: list[str]) -> tuple[int, str | None, list[str]] | None:
    """(parent pid, shm prefix, command) of ``--parent PID [--shm-prefix NAME] -- CMD...``; None when malformed."""
    if "--" not in argv:
        return None
    sep = argv.index("--")
    opts, cmd = argv[:sep], argv[sep + 1 :]
    if not cmd or len(opts) % 2:
        return None
    named = dict(zip(opts[::2], opts[1::2], strict=True))
    if set(named) - {"--parent", "--shm-prefix"} or not named.get("--parent", "").isdigit():
        return None
    return int(named["--parent"]), named.get("--shm-prefix"), cmd


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        sys.stderr.write("usage: python -m toolchain.watchdog --parent PID [--shm-prefix NAME] -- CMD...\n")
        return 2
    parent, shm_prefix, cmd = parsed
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
    orphaned = False
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
        if os.getppid() != parent:  # the parent died and no death signal came (prctl unavailable)
            orphaned = True
            break
        time.sleep(0.1)
    # the death signal arrives after the kernel has re-parented us: a changed parent tells it from a stop request
    orphaned = orphaned or os.getppid() != parent
    # after the server's own exit its stubs go at once; a stop request lets Triton drain and unload
    _stop_group(0.5 if code is not None else PARENT_GONE_GRACE_S if orphaned else GRACE_S)
    _remove_shm(shm_prefix)
    if code is None:
        code = -(stop["sig"] or signal.SIGTERM)
    if code < 0:  # die of the same signal, so the caller sees what happened to the server
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
