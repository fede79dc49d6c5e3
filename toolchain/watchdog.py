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
  to tritonserver), which a server killed before its own cleanup leaves behind;
- writes CMD's output (stdout and stderr, one pipe) to its own stdout, the server log, line by line through
  ``toolchain.redact`` (a URL's ``user:password@``, a ``token=`` parameter, an ``Authorization`` header never reach
  the log). Each line is written as soon as it is complete, and an unfinished one as soon as the pipe has been
  quiet for a poll (0.1 s), so a reader of the log (the readiness wait) sees what CMD printed without delay.

It is started in a new session, so CMD and everything CMD forks (the stubs) share its process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from toolchain import redact

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


class _Pump:
    """Copies the server's output pipe to ``out`` (a file descriptor: the log) redacted, while the watchdog waits."""

    def __init__(self, fd: int, out: int) -> None:
        self.fd, self.out, self.lines = fd, out, redact.Lines()
        self.sel: selectors.BaseSelector | None = selectors.DefaultSelector()
        self.sel.register(fd, selectors.EVENT_READ)

    def wait(self, seconds: float) -> None:
        """Copy what arrives for ``seconds`` (returns early at the pipe's end); an unfinished line goes out when
        nothing arrived for a whole wait."""
        if self.sel is None:  # every writer closed the pipe
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        quiet = True
        while self.sel is not None and (left := deadline - time.monotonic()) > 0:
            if not self.sel.select(left):
                break
            quiet = False
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._write(self.lines.flush())
                self.sel.close()
                self.sel = None
                return
            self._write(self.lines.feed(chunk))
        if quiet:
            self._write(self.lines.flush())

    def drain(self, seconds: float) -> None:
        """Copy the rest until every writer closed the pipe, at most ``seconds`` (a process that left the group
        may hold it open), then the unfinished line."""
        deadline = time.monotonic() + seconds
        while self.sel is not None and (left := deadline - time.monotonic()) > 0:
            self.wait(min(left, 0.1))
        self._write(self.lines.flush())

    def _write(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.out, data) :]
            except OSError:  # the log is gone (disk full, closed): the server must not block on a full pipe
                return


def _stop_group(grace: float, pause: Callable[[float], None] = time.sleep) -> None:
    """SIGTERM every other process of this group (and adopted orphans), wait up to ``grace``, then SIGKILL.
    ``pause`` waits between checks (the output pump: a server writing while it drains must not block)."""
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
            pause(0.1)
        _reap()
        if _others_alive(pgid):
            for pid in _group_members(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            pause(0.1)
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
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # to the log, redacted
    assert child.stdout is not None
    pump = _Pump(child.stdout.fileno(), 1)  # our stdout: the log file
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
        pump.wait(0.1)
    # the death signal arrives after the kernel has re-parented us: a changed parent tells it from a stop request
    orphaned = orphaned or os.getppid() != parent
    # after the server's own exit its stubs go at once; a stop request lets Triton drain and unload
    _stop_group(0.5 if code is not None else PARENT_GONE_GRACE_S if orphaned else GRACE_S, pump.wait)
    pump.drain(1.0)
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
