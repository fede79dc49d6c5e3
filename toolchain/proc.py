"""The one subprocess helper: argument lists only, logged with shlex.join, output to a log file,
exit code always checked, the log tail shown on failure, the whole process group stopped on
Ctrl-C or timeout."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from toolchain import redact
from toolchain.logs import redact_argv

log = logging.getLogger("toolchain.proc")  # shown under TOOLCHAIN_DEBUG=1 (toolchain/logs.py)


def _started(cmd: list[str], pid: int) -> None:
    log.debug("started pid %d: %s", pid, shlex.join(redact_argv(cmd)))


def _ended(pid: int, returncode: int | None, how: str = "exited") -> None:
    log.debug("pid %d %s with code %s", pid, how, returncode)


def tail(path: Path, lines: int = 25) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return redact.text("\n".join(text.splitlines()[-lines:]))


def stop_group(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL."""
    if proc.poll() is not None:
        _ended(proc.pid, proc.returncode)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    _ended(proc.pid, proc.returncode, "stopped")


@dataclass(frozen=True)
class RunResult:
    returncode: int
    seconds: float
    log_path: Path


def run_logged(
    cmd: list[str],
    log_path: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    on_line: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``cmd`` with stdout+stderr appended to ``log_path``; never raises on a non-zero exit. The command line
    and every line of output go into the log through ``toolchain.redact`` (so do the lines ``on_line`` gets).

    The deadline is checked on a clock, not on output: a child that prints nothing is still
    stopped (its whole process group, SIGTERM then SIGKILL) when ``timeout`` seconds have passed,
    and the result has returncode -9.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    deadline = t0 + timeout if timeout else None
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(redact_argv(cmd))}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True
        )
        _started(cmd, proc.pid)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        tee = _Tee(log, on_line)
        try:
            if not _copy_until_eof(fd, deadline, tee):
                tee.close()
                return _kill_at_deadline(proc, log, timeout, t0, log_path)
            tee.close()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                rc = proc.wait(remaining)
            except subprocess.TimeoutExpired:
                return _kill_at_deadline(proc, log, timeout, t0, log_path)
        except BaseException:
            stop_group(proc)
            raise
        finally:
            proc.stdout.close()
    _ended(proc.pid, rc)
    return RunResult(rc, time.monotonic() - t0, log_path)


class _Tee:
    """Appends the child's output to the log, redacted line by line, and hands each complete line to ``on_line``."""

    def __init__(self, log: BinaryIO, on_line: Callable[[str], None] | None) -> None:
        self.log, self.on_line, self.lines, self.pending = log, on_line, redact.Lines(), b""

    def write(self, chunk: bytes) -> None:
        """Log the lines ``chunk`` completes at once; keep the unfinished rest until it ends or the pipe is quiet."""
        self._out(self.lines.feed(chunk))

    def quiet(self) -> None:
        """The child printed nothing for a while: log its unfinished line (a prompt, a progress bar) as it is."""
        self._out(self.lines.flush())

    def close(self) -> None:
        """Log (and pass on) the last line when the output did not end with a newline."""
        self._out(self.lines.flush())
        if self.pending and self.on_line is not None:
            self.on_line(self.pending.decode("utf-8", "replace"))
        self.pending = b""

    def _out(self, data: bytes) -> None:
        if not data:
            return
        self.log.write(data)
        self.log.flush()
        if self.on_line is None:
            return
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for raw in lines:
            self.on_line(raw.decode("utf-8", "replace").rstrip("\r"))


def _copy_until_eof(fd: int, deadline: float | None, tee: _Tee) -> bool:
    """Copy the pipe to ``tee`` until every writer closed it (True) or the deadline passed (False)."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if deadline is not None and wait == 0.0:
                return False
            if not sel.select(min(wait, 0.5) if wait is not None else 0.5):
                tee.quiet()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # every writer closed the pipe
                return True
            tee.write(chunk)


def _kill_at_deadline(
    proc: subprocess.Popen[bytes], log: BinaryIO, timeout: float | None, t0: float, log_path: Path
) -> RunResult:
    """Stop the timed-out child's process group, say so in the log, and report returncode -9."""
    stop_group(proc, grace=2.0)
    log.write(f"\n[toolchain] killed after {timeout:g} s timeout\n".encode())
    return RunResult(-9, time.monotonic() - t0, log_path)


Popen = subprocess.Popen  # the process handle type, for callers that hold one (no other module imports subprocess)
PIPE = subprocess.PIPE


@dataclass(frozen=True)
class Captured:
    """What a short command printed: ``returncode`` None when it could not start or ran past its timeout
    (``error`` says which)."""

    returncode: int | None
    stdout: str
    stderr: str
    error: str | None = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def capture(cmd: list[str], *, timeout: float, input: str | None = None, env: dict[str, str] | None = None) -> Captured:
    """Run a short command (a probe, a credential helper, ``ldd``) to completion with a deadline; its output as
    text. Never raises for a missing binary or a timeout: the caller decides what that means."""
    try:
        p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if input is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    except OSError as e:
        log.debug("could not start %s: %s", shlex.join(redact_argv(cmd)), e)
        return Captured(None, "", "", f"{shlex.join(cmd[:1])} could not start: {e.strerror or e}")
    _started(cmd, p.pid)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        # as subprocess.run does: kill and wait, never read on (a grandchild may hold the pipes open)
        p.kill()
        p.wait()
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        _ended(p.pid, p.returncode, "killed at its deadline")
        return Captured(
            None, out or "", "", f"{shlex.join(cmd[:1])} gave no answer within {timeout:g} s", timed_out=True
        )
    except BaseException:
        p.kill()
        p.wait()
        raise
    _ended(p.pid, p.returncode)
    return Captured(p.returncode, out, err)


def spawn_guarded(
    cmd: list[str], log_path: Path, env: dict[str, str], *, watchdog_args: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start a long-running ``cmd`` (a server, a worker) under the toolchain's watchdog in a new session, the
    command line and then its output in ``log_path``. The watchdog ties the child's whole tree to this process:
    it dies with us even on SIGKILL (toolchain/watchdog.py)."""
    import sys

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        log.write(("$ " + shlex.join(redact_argv(cmd)) + "\n").encode())
        log.flush()
        guarded = [sys.executable, "-m", "toolchain.watchdog", "--parent", str(os.getpid())]
        guarded += [*watchdog_args, "--", *cmd]
        proc = subprocess.Popen(guarded, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _started(cmd, proc.pid)  # the watchdog's pid: the command runs under it
    return proc


def spawn_pipes(cmd: list[str], *, cwd: str | None = None) -> subprocess.Popen[str]:
    """Start a line-protocol worker (stdin and stdout as text pipes, stderr discarded)."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd
    )
    _started(cmd, proc.pid)
    return proc


def finish(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Wait for a process that was asked to end (its stdin closed); killed after ``timeout`` seconds."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _ended(proc.pid, proc.returncode)


def wait_ready(
    not_ready: Callable[[], str | None],
    *,
    timeout: float,
    stage: str,
    progress: Callable[..., None] | None = None,
    alive: Callable[[], None] = lambda: None,
    probe: Callable[[], str | None] | None = None,
    poll: float = 0.2,
    on_timeout: Callable[[str], BaseException] | None = None,
) -> float:
    """The one readiness wait of every server launcher: until ``not_ready()`` returns None (it returns why the
    thing is not ready yet), at most ``timeout`` seconds. ``alive()`` raises when the processes died; a line
    every second says what it waits on (``probe()``, else the reason); the last line says how the wait ended
    (done, interrupted, failed). Returns the seconds it took; past the deadline, raises ``on_timeout(reason)``
    (a TimeoutError by default)."""
    from toolchain.progress import Heartbeat, silent

    t0 = time.monotonic()
    deadline = t0 + timeout
    state: dict[str, str | None] = {"why": "starting"}
    with Heartbeat(progress or silent, stage, probe or (lambda: state["why"])):
        while True:
            alive()
            state["why"] = not_ready()
            if state["why"] is None:
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                why = state["why"] or "not ready"
                raise (
                    on_timeout(why) if on_timeout else TimeoutError(f"{stage}: not ready within {timeout:g} s ({why})")
                )
            time.sleep(poll)
