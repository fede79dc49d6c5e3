"""One progress interface for long work, called by the library and rendered by the CLI.

A library function that takes time accepts ``progress: Progress = silent`` and calls it:

- ``progress("loading checkpoint")`` — a step starts (narration);
- ``progress("calibrating", 3, 8, unit="batch")`` — counted work, 3 of 8 done;
- ``progress("push", 1.2e8, 8e8, unit="B")`` — bytes (the renderer adds rate and ETA);
- ``progress("trtllm-build", 42.0, None, unit="s", message=last_log_line)`` — open-ended work: elapsed
  seconds and the latest thing it said.

The library never renders anything and never imports a terminal library; ``toolchain.cli.render``
holds the one renderer (bars on a terminal, periodic lines on stderr otherwise). ``Heartbeat`` keeps
a blocking wait (a subprocess, a server coming up) reporting at least once a second.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Progress(Protocol):
    def __call__(
        self,
        stage: str,
        done: float | None = None,
        total: float | None = None,
        *,
        unit: str = "",
        message: str | None = None,
    ) -> None: ...


def silent(
    stage: str, done: float | None = None, total: float | None = None, *, unit: str = "", message: str | None = None
) -> None:
    """The default: report nothing."""


def prefixed(progress: Progress, prefix: str) -> Progress:
    """The same progress, every stage name prefixed (for a sub-step of a pipeline)."""

    def inner(
        stage: str, done: float | None = None, total: float | None = None, *, unit: str = "", message: str | None = None
    ) -> None:
        progress(prefix + stage, done, total, unit=unit, message=message)

    return inner


class Heartbeat:
    """While the ``with`` block runs, report ``stage`` every ``every`` seconds: elapsed time and ``probe()``.

    ``probe`` returns the latest thing worth showing (a log line, model load states) or None.
    """

    def __init__(
        self,
        progress: Progress,
        stage: str,
        probe: Callable[[], str | None] = lambda: None,
        every: float = 1.0,
    ) -> None:
        self.progress, self.stage, self.probe, self.every = progress, stage, probe, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat:{stage}", daemon=True)
        self.t0 = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.beat()

    def _probe(self) -> str | None:
        try:
            return self.probe()
        except Exception:  # a probe must never break the work it watches
            return None

    def beat(self) -> None:
        self.progress(self.stage, time.monotonic() - self.t0, None, unit="s", message=self._probe())

    def __enter__(self) -> Heartbeat:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None = None, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        elapsed = time.monotonic() - self.t0
        if exc_type is not None:
            # the wait did not finish: its last line says so ("interrupted", "failed"), never "done" (a line of
            # its own, which a renderer prints whole and never throttles)
            ended = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed"
            self.progress(f"{self.stage}: {ended} after {elapsed:.0f} s")
            return
        # the stage ended: one last report (probed afresh: the states now, not a second ago) with done ==
        # total, so a renderer turns its live line into a final one
        self.progress(self.stage, elapsed, elapsed, unit="s", message=self._probe())


def importing(progress: Progress, modules: tuple[str, ...], what: str | None = None) -> None:
    """Import ``modules`` (torch, transformers, ModelOpt: seconds each on a cold start) with a line first and
    a heartbeat while it lasts, so a terminal never sits silent on an import. A module that cannot be imported
    is left for the caller's own ``require`` to report (with its extra's install hint)."""
    import sys

    missing = [m for m in modules if m not in sys.modules]
    if not missing:
        return
    label = what or f"loading {', '.join(missing)}"
    progress(label)
    with Heartbeat(progress, label, lambda: None, every=1.0):
        for m in missing:
            try:
                importlib.import_module(m)
            except ImportError:
                return
