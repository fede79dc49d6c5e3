"""Output helpers: data on stdout, narration on stderr."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import weakref
from typing import Any

from rich.console import Console
from rich.markup import escape

# the CLI renders sizes and durations in the one format of toolchain.units (re-exported for its commands)
from toolchain.units import fmt_bytes as fmt_bytes
from toolchain.units import fmt_ms as fmt_ms


class _Redacting(Console):
    """A console whose text passes through ``toolchain.redact.text`` first: no narration or progress line shows
    a password, token or signature (a URL with credentials the user gave, a presigned URL)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from toolchain import redact

        texts = [redact.text(o) if isinstance(o, str) else o for o in objects]
        # On a terminal a narration line wraps at spaces (a figure or path is never split by the terminal at the
        # 80th column). Left as one line: text with markup (rich's tags may hold spaces), a line a caller marks
        # soft_wrap=True (a command to copy: a hard line break in it would break the command pasted), and
        # anything not going to a terminal (FORCE_COLOR makes rich call a pipe a terminal; this asks the file).
        plain = kwargs.get("markup") is False or all(isinstance(o, str) and "[" not in o for o in texts)
        whole = "soft_wrap" in kwargs
        if not whole and plain and texts and all(isinstance(o, str) for o in texts) and _isatty(self.file):
            texts = [wrapped(kwargs.get("sep", " ").join(texts), max(self.width, 40))]
        super().print(*texts, **kwargs)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def wrapped(text: str, width: int) -> str:
    """``text`` with each line wrapped at spaces to ``width`` and a hanging indent; a word longer than a line (a
    path, a key) stands whole on its own line, never split nor cut."""
    import textwrap

    lines: list[str] = []
    for line in text.splitlines():
        lead = line[: len(line) - len(line.lstrip(" "))]
        # a `quoted command` is never broken: its spaces are held (no-break) while the line is wrapped
        held = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", _HELD), line)
        lines += [
            part.replace(_HELD, " ")
            for part in textwrap.wrap(
                held,
                width,
                subsequent_indent=lead + "    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        ] or [""]
    return "\n".join(lines)


_HELD = "\x00"  # stands for a space textwrap must not break at (it breaks only at ASCII whitespace)


out = _Redacting(soft_wrap=True, width=None if sys.stdout.isatty() else 180)
err = _Redacting(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 180)


# Whether this invocation has printed a JSON document on stdout (the error table then adds none: one
# document per command). Reset by the error table at the start of every command.
_json_printed = [False]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    _json_printed[0] = True


def json_printed(reset: bool = False) -> bool:
    """Whether a JSON document went to stdout since the last ``reset``."""
    was = _json_printed[0]
    if reset:
        _json_printed[0] = False
    return was


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A box-drawn table of plain text on stdout, laid out in one pass: fast for 10,000s of rows
    (a rich Table measures and styles every cell, ~0.4 ms a row). Cells are printed as they are."""
    widths = [len(c) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def cells(sep: str, values: list[str]) -> str:
        return sep + sep.join(f" {v.ljust(w)} " for v, w in zip(values, widths, strict=True)) + sep

    total = sum(widths) + 3 * len(widths) + 1
    if sys.stdout.isatty() and total > max(out.width, 40):
        sys.stdout.write("\n".join(_records(title, columns, rows, max(out.width, 40))) + "\n")
        return
    parts = [title.center(total).rstrip(), line("┏", "━", "┳", "┓"), cells("┃", columns), line("┡", "━", "╇", "┩")]
    parts += [cells("│", row) for row in rows]
    parts.append(line("└", "─", "┴", "┘"))
    sys.stdout.write("\n".join(parts) + "\n")


def _records(title: str, columns: list[str], rows: list[list[str]], width: int) -> list[str]:
    """A table too wide for the terminal, one record per row: the first cell on its own line, then each other
    column as "name value", packed onto indented lines no wider than ``width``; a value is never split."""
    lines = [title]
    for row in rows:
        lines.append(row[0])
        current = ""
        for name, value in zip(columns[1:], row[1:], strict=True):
            pair = f"{name} {value}" if value else f"{name} -"
            if current and len(current) + 3 + len(pair) > width:
                lines.append(current)
                current = ""
            current = f"{current} · {pair}" if current else f"  {pair}"
        if current:
            lines.append(current)
    return lines


def print_wrapped(text: str) -> None:
    """Plain text on stdout, each line wrapped at spaces to the terminal's width with a hanging indent, so
    that the terminal never splits a figure ("0.8" | "0 GPUs"); unwrapped where stdout is not a terminal."""
    from toolchain import redact

    text = redact.text(text)
    if not sys.stdout.isatty():
        sys.stdout.write(text + "\n")
        return
    sys.stdout.write(wrapped(text, max(out.width, 40)) + "\n")


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked with "…"."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 cell``, ``2 cells``; ``many`` where adding "s" is wrong (``entry``/``entries``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _amount(x: float, unit: str) -> str:
    if unit == "B":
        return fmt_bytes(x)
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


class Stages:
    """The one renderer of ``toolchain.progress.Progress``, on stderr.

    A plain ``stage`` is one timed narration line. Counted work (``done``/``total``) becomes a bar on a
    terminal, and otherwise a line at most every ``every`` seconds per stage (plus one when it is
    complete), with rate and ETA for bytes and the latest message for open-ended work.

    On a terminal nothing stays silent for more than ``quiet_after`` seconds: when no bar is drawing and
    nothing was printed for that long, a line says which stage is still running and for how long.
    """

    quiet_after = 2.5

    def __init__(self, quiet: bool = False, *, every: float = 3.0, tty: bool | None = None) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet
        self.every = every
        self.tty = err.is_terminal if tty is None else tty
        self._lock = threading.Lock()
        self._first: dict[str, tuple[float, float]] = {}  # stage -> (time, done) at its first update
        self._last_line: dict[str, float] = {}
        self._bars: Any = None
        self._tasks: dict[str, Any] = {}
        self._stage: tuple[str, float] | None = None  # the latest narrated stage and when it began
        self._printed = time.monotonic()
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None
        _OPEN.add(self)
        if tty is None and self.tty and not quiet:  # a real terminal: covered from the start
            self._stage = ("starting", self.t0)
            self._start_ticker()

    def _tick(self) -> None:
        while not self._closed.wait(0.25):
            with self._lock:
                now = time.monotonic()
                if self._bars is not None or self._stage is None or now - self._printed < self.quiet_after:
                    continue
                stage, began = self._stage
                err.print(f"{self._stamp()}   … still {escape(stage)} ({now - began:.0f} s)", highlight=False)
                self._printed = now

    def _start_ticker(self) -> None:
        if self.tty and self._ticker is None and not self._closed.is_set():
            self._ticker = threading.Thread(target=self._tick, name="stages-ticker", daemon=True)
            self._ticker.start()

    def _stamp(self) -> str:
        return f"[dim][{time.monotonic() - self.t0:6.1f}s][/dim]"

    def describe(self, stage: str, done: float, total: float | None, unit: str, message: str | None) -> str:
        now = time.monotonic()
        t_first, d_first = self._first.setdefault(stage, (now, done))
        if unit == "s" and total is not None and done >= total:
            text = f"{stage}: done in {done:.0f} s"
        elif unit == "s":
            text = f"{stage}: {done:.0f} s elapsed"
        elif total:
            text = f"{stage}: {_amount(done, unit)} / {_amount(total, unit)} {'' if unit == 'B' else unit}".rstrip()
            text += f" ({done / total:.0%})"
        else:
            text = f"{stage}: {_amount(done, unit)} {'' if unit == 'B' else unit}".rstrip()
        if unit == "B" and now - t_first > 0.2 and done > d_first:
            rate = (done - d_first) / (now - t_first)
            text += f", {fmt_bytes(rate)}/s"
            if total and done < total:
                text += f", ETA {(total - done) / rate:.0f} s"
        if message:
            text += f" — {message.strip()[:160]}"
        return text

    def __call__(
        self,
        stage: str,
        done: float | None = None,
        total: float | None = None,
        *,
        unit: str = "",
        message: str | None = None,
    ) -> None:
        if self.quiet:
            return
        with self._lock:
            self._start_ticker()
            self._printed = time.monotonic()
            if done is None:
                self._close_bars()
                self._stage = (stage.strip(), time.monotonic())
                err.print(f"{self._stamp()} {escape(stage)}", highlight=False)
                return
            if self.tty:
                self._bar(stage, done, total, unit, message)
                return
            now = time.monotonic()
            complete = total is not None and done >= total
            last = self._last_line.get(stage)
            if last is not None and now - last < self.every and not complete:
                self.describe(stage, done, total, unit, message)  # keeps the rate's origin
                return
            self._last_line[stage] = now
            err.print(f"{self._stamp()} " + escape(self.describe(stage, done, total, unit, message)), highlight=False)

    bar_width = 12

    def _bar(self, stage: str, done: float, total: float | None, unit: str, message: str | None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn
        from rich.table import Column

        if self._bars is None:
            self._bars = Progress(
                BarColumn(bar_width=self.bar_width),
                # one text per line, cut here to the screen (rich would shorten the stage's name first):
                # the stage whole, then its figures; one clock per line, the elapsed time in ``describe``
                TextColumn("{task.fields[line]}", table_column=Column(no_wrap=True)),
                console=err,
                transient=False,
                # never swap sys.stdout/sys.stderr: a bar started inside someone's redirect_stdout would
                # put that (by then closed) file back as sys.stdout when it stops
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._bars.start()
        from toolchain import redact

        described = redact.text(self.describe(stage, done, total, unit, message))
        line = escape(fit(described, err.width - self.bar_width - 1))
        if stage not in self._tasks:
            self._tasks[stage] = self._bars.add_task(escape(stage), total=total, line=line)
        self._bars.update(self._tasks[stage], completed=done, total=total, line=line)
        if total is not None and done >= total and self._stage is not None and self._stage[0] == stage.strip():
            # the narrated stage ended: the "still ..." ticker must not go on naming it
            self._stage = (f"working (after {stage.strip()})", time.monotonic())
        if all(t.finished for t in self._bars.tasks):  # every stage on screen ended: draw it once, stop
            self._close_bars()

    def settle(self) -> None:
        """Nothing is running now (a server is ready and waits for Ctrl-C): stop every bar and the
        "still ..." ticker, so nothing redraws or ticks after the final line."""
        with self._lock:
            self._close_bars()
            self._stage = None

    def _close_bars(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars, self._tasks = None, {}

    @staticmethod
    def settle_all() -> None:
        """``settle`` every open renderer (a command is about to print its result)."""
        for stages in list(_OPEN):
            stages.settle()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._close_bars()


_OPEN: weakref.WeakSet[Stages] = weakref.WeakSet()


def close_all() -> None:
    """Stop every bar still drawing (the command ended, or failed): what is printed next stays readable."""
    for stages in list(_OPEN):
        stages.close()
