"""What a request to a registry (``oci://``, ``s3://``) or the Hugging Face Hub (``toolchain.hub``) waits on,
said every few seconds while nothing comes (the ``ReportsWaits`` capability, toolchain/registry/capabilities.py):
a frozen registry is never a silent one."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


def what_of(method: str, path: str) -> str:
    """A request in a few words, for the lines that say what is awaited: ``GET manifest``, ``PATCH upload``."""
    for part, name in (("/manifests/", "manifest"), ("/blobs/uploads", "upload"), ("/blobs/", "blob")):
        if part in path:
            return f"{method} {name}"
    return f"{method} {path.rsplit('/', 1)[-1][:20]}"


class Waits:
    """The transport's in-flight requests and the thread that reports them (started while any is in flight)."""

    host: str
    read_timeout: float
    waiting: Callable[[str], None] | None
    _lock: threading.Lock
    _inflight: dict[int, tuple[str, float]]
    _watching: bool

    @contextlib.contextmanager
    def waiting_on(self, what: str) -> Iterator[Callable[[], None]]:
        """Report ``what`` (through ``waiting``) every few seconds while nothing comes; the yielded callable
        says something came (a chunk of a download)."""
        me = object()
        token = id(me)

        def came() -> None:
            self._inflight[token] = (what, time.monotonic())

        with self._lock:
            self._inflight[token] = (what, time.monotonic())
            start = self.waiting is not None and not self._watching
            self._watching = self._watching or start
        if start:
            threading.Thread(target=self._watch, name="registry-waits", daemon=True).start()
        try:
            yield came
        finally:
            with self._lock:
                self._inflight.pop(token, None)

    def _watch(self) -> None:
        """While requests are in flight: every few seconds, one line for each that has had nothing for as long."""
        every = max(0.25, min(2.5, self.read_timeout / 3))
        while True:
            time.sleep(every)
            with self._lock:
                items = list(self._inflight.values())
                if not items:
                    self._watching = False
                    return
            now, report = time.monotonic(), self.waiting
            for what, since in items:
                if report is not None and now - since >= every:
                    report(f"waiting on {self.host}: {what} ({now - since:.1f} s)")
