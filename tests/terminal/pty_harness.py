"""Run a command on a pseudo-terminal, as a person at a terminal would (stdlib ``pty``), and time its output.

The child is the session leader of a fresh pty, so it sees a TTY on stdin, stdout and stderr (rich draws
bars, ``isatty()`` is true) and Ctrl-C (byte 0x03 written to the master side) reaches its foreground process
group as SIGINT through the terminal's line discipline, exactly as a keyboard would send it.

``longest_silence`` is the longest time between two reads that returned bytes (from the start to the first
byte, and from the last byte to the exit, count too): what a person staring at the screen would wait.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@dataclass
class PtyRun:
    argv: list[str]
    returncode: int
    output: bytes
    seconds: float
    longest_silence: float
    silence_after: str  # the last text printed before the longest silence began
    chunks: list[tuple[float, bytes]] = field(repr=False, default_factory=list)

    @property
    def text(self) -> str:
        """The output with terminal escapes and carriage returns removed."""
        return ANSI.sub(b"", self.output).decode("utf-8", "replace")

    def describe(self) -> str:
        tail = self.text[-3000:]
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s; longest silence "
            f"{self.longest_silence:.1f} s after {self.silence_after!r}\n--- last output ---\n{tail}"
        )


def _set_size(fd: int, rows: int = 40, cols: int = 160) -> None:
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def run_on_pty(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    timeout: float = 600.0,
    interrupt_when: Callable[[bytes], bool] | None = None,
    interrupt_after: float = 0.0,
    cols: int = 160,
) -> PtyRun:
    """Run ``argv`` on a new pty until it exits (SIGKILL at ``timeout``: returncode -9).

    ``interrupt_when(output_so_far)``: once it is true (and ``interrupt_after`` seconds later), type Ctrl-C."""
    t0 = time.monotonic()
    pid, master = pty.fork()
    if pid == 0:  # the child: stdin/stdout/stderr are the pty's slave side
        try:
            if cwd is not None:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    _set_size(master, cols=cols)
    chunks: list[tuple[float, bytes]] = []
    buf = bytearray()
    interrupt_at: float | None = None
    interrupted = False
    status: int | None = None
    try:
        while True:
            now = time.monotonic()
            if now - t0 > timeout:
                os.kill(pid, signal.SIGKILL)
            if interrupt_when is not None and interrupt_at is None and interrupt_when(bytes(buf)):
                interrupt_at = now + interrupt_after
            if interrupt_at is not None and not interrupted and now >= interrupt_at:
                os.write(master, b"\x03")
                interrupted = True
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every slave side is closed
                    data = b""
                if data:
                    chunks.append((time.monotonic(), data))
                    buf += data
                    continue
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                # drain what is left in the pty
                while select.select([master], [], [], 0.05)[0]:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        break
                    if not data:
                        break
                    chunks.append((time.monotonic(), data))
                    buf += data
                break
    finally:
        os.close(master)
        if status is None:
            with _suppress():
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
    t_end = time.monotonic()
    rc = os.waitstatus_to_exitcode(status) if status is not None else -9
    longest, after, last_t, last_text = 0.0, "(start)", t0, b""
    for t, data in [*chunks, (t_end, b"")]:
        if t - last_t > longest:
            longest, after = t - last_t, ANSI.sub(b"", last_text).decode("utf-8", "replace").strip()[-120:]
        last_t, last_text = t, (last_text + data)[-400:]
    return PtyRun(argv, rc, bytes(buf), t_end - t0, longest, after, chunks)


def truncated_cells(text: str) -> list[str]:
    """Lines of box-drawn tables (rich's or ``print_table``'s) with a cell cut short ("…") or wider than
    the terminal's 80 columns: what a person at an 80-column terminal could not read."""
    bad = []
    for line in text.splitlines():
        if any(ch in line for ch in "┃│┏┡└┗╇") and ("…" in line or len(line) > 80):
            bad.append(line)
    return bad


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True
