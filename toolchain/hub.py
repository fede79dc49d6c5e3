"""Every wait on the Hugging Face Hub bounded and said: huggingface_hub's shared HTTP client, as the toolchain
makes it (through the library's own ``set_client_factory`` hook).

* Deadlines: ``TOOLCHAIN_HTTP_CONNECT_TIMEOUT`` to connect; a read may have nothing for at most
  ``TOOLCHAIN_HF_STALL_TIMEOUT`` (default 20 s, never more than ``TOOLCHAIN_HTTP_READ_TIMEOUT``). The library's
  own per-request timeouts (``etag_timeout``, ``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s by
  default) are kept where shorter and capped where longer; its default client has no timeout at all, so a
  ``snapshot_download`` of a Hub that accepts and never answers waited forever.
* A stall is named, not waited out again: the read that timed out raises :class:`HubStalled` (an
  ``httpx.ReadTimeout``, so the library still falls back to a cached file as it does for a timeout), and for
  as long as the deadline again every request to that host fails at once with :class:`HubStopped`, which the
  library neither retries nor resumes (without it, ``hf_hub_download`` asks again with a 60 s timeout and
  five tries of backoff: 150 s and more measured against a silent server).
* Progress: while a request has had nothing for a few seconds, the reporter given to :func:`reporting` is
  told what is awaited (``waiting on the Hub (HOST): HEAD config.json (2.5 s)``).

Callers turn either exception, found in the chain of what the library raised, into their one-line error with
:func:`stopped_message`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from toolchain import http, settings
from toolchain.errors import UserInputError
from toolchain.waits import Waits

SETTING = "TOOLCHAIN_HF_STALL_TIMEOUT"


class HubStalled(httpx.ReadTimeout):
    """A read from the Hub that had nothing for the stall deadline."""


class HubStopped(httpx.TransportError):
    """A request to a Hub host that stalled a moment ago: failed at once, neither retried nor resumed."""


def deadlines() -> tuple[float, float, str]:
    """(connect, stall, the setting that bounds the stall) from the settings; a bad value is a user error."""
    connect, read = http.timeouts()
    try:
        stall = settings.hf_stall_timeout()
    except ValueError as e:
        raise UserInputError(str(e), "set it to seconds, e.g. 20 (or unset it for the default)") from e
    return connect, min(read, stall), SETTING if stall < read else "TOOLCHAIN_HTTP_READ_TIMEOUT"


def stopped_message(e: BaseException) -> str | None:
    """The 'stopped answering' line when ``e`` or an exception it was raised from is a Hub stall; else None."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (HubStalled, HubStopped)):
            return str(cur)
        cur = cur.__cause__ or cur.__context__
    return None


class _Waits(Waits):
    """The requests in flight to the Hub, reported through the innermost :func:`reporting`'s callable."""

    def __init__(self) -> None:
        self.host = "the Hugging Face Hub"
        self.read_timeout = 20.0
        self.waiting: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._inflight: dict[int, tuple[str, float]] = {}
        self._watching = False


WAITS = _Waits()
_STOPPED: dict[str, tuple[float, float]] = {}  # host -> (when it was found stalled, monotonic; its read deadline)
_CONFIGURED: list[tuple[float, float, str]] = []  # the deadlines the shared client was last made with


@contextlib.contextmanager
def reporting(report: Callable[[str], None] | None) -> Iterator[None]:
    """While the block runs, ``report`` is told what a Hub request waits on (None: nothing is said)."""
    before = WAITS.waiting
    WAITS.waiting = report
    try:
        yield
    finally:
        WAITS.waiting = before


def _stopped(host: str, read: float, setting: str, stall: float) -> str:
    """The line; the setting is named only when its deadline was the one that ran out (not a shorter one the
    caller gave, like planning's 3 s metadata probe)."""
    raise_it = f"raise {setting} if it is only slow, or " if read >= stall else ""
    silence = f"nothing for {read:g} s"
    return f"the Hugging Face Hub ({host}) stopped answering ({silence}); {raise_it}check HF_ENDPOINT and a proxy"


class _GuardedStream(httpx.SyncByteStream):
    """A response body whose reads that time out are a stall, and whose chunks say the Hub still answers."""

    def __init__(self, inner: Any, came: Callable[[], None], done: Callable[[], None], stalled: Callable[..., Any]):
        self.inner, self.came, self.done, self.stalled = inner, came, done, stalled

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.inner:
                self.came()
                yield chunk
        except httpx.ReadTimeout as e:
            raise self.stalled(e) from e

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.done()


class _Guard(httpx.BaseTransport):
    """httpx transport around the library's own: caps each read deadline, names a stall, reports waits."""

    def __init__(self, inner: httpx.BaseTransport, stall: float, setting: str) -> None:
        self.inner, self.stall, self.setting = inner, stall, setting

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.netloc.decode()
        WAITS.host = f"the Hub ({host})"
        since, waited = _STOPPED.get(host, (None, self.stall))
        if since is not None and time.monotonic() - since < self.stall:
            raise HubStopped(_stopped(host, waited, self.setting, self.stall), request=request)
        timeout = dict(request.extensions.get("timeout") or {})
        read = timeout.get("read")
        read = self.stall if read is None else min(float(read), self.stall)
        timeout["read"] = read
        timeout["write"] = read if timeout.get("write") is None else min(float(timeout["write"]), read)
        request.extensions["timeout"] = timeout

        def stalled(e: BaseException) -> HubStalled:
            _STOPPED[host] = (time.monotonic(), read)
            return HubStalled(_stopped(host, read, self.setting, self.stall), request=request)

        path = request.url.path
        name = "model info" if path.startswith("/api/") else path.rstrip("/").rsplit("/", 1)[-1][:20] or "/"
        waiting = WAITS.waiting_on(f"{request.method} {name}")
        came = waiting.__enter__()
        try:
            resp = self.inner.handle_request(request)
        except (httpx.ReadTimeout, httpx.WriteTimeout) as e:
            waiting.__exit__(None, None, None)
            raise stalled(e) from e
        except BaseException:
            waiting.__exit__(None, None, None)
            raise
        came()
        _STOPPED.pop(host, None)

        def done() -> None:
            waiting.__exit__(None, None, None)

        return httpx.Response(
            resp.status_code,
            headers=resp.headers,
            stream=_GuardedStream(resp.stream, came, done, stalled),
            extensions=resp.extensions,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


def install() -> tuple[float, float]:
    """Make huggingface_hub's shared client (process-wide) the guarded one, with the settings' deadlines; it is
    remade only when they change. Returns (connect, stall) seconds."""
    from huggingface_hub.utils import _http as hub_http

    c, stall, setting = deadlines()
    key = (c, stall, setting)
    WAITS.read_timeout = stall
    if _CONFIGURED and _CONFIGURED[-1] == key:
        return c, stall
    factory = getattr(hub_http, "default_client_factory", None)
    setter = getattr(hub_http, "set_client_factory", None)
    if factory is None or setter is None:  # huggingface_hub < 1.0 (requests): nothing to hook
        return c, stall

    def make() -> Any:
        client = factory()
        client.timeout = httpx.Timeout(stall, connect=c)
        hooks = client.event_hooks  # the library's own hooks stay; ours log each answer under TOOLCHAIN_DEBUG=1
        for event, fns in http.log_hooks().items():
            hooks[event] = [*hooks.get(event, []), *fns]
        client.event_hooks = hooks
        # every transport the client sends through (its own, and a proxy's from the environment) is guarded
        client._transport = _Guard(client._transport, stall, setting)
        client._mounts = {k: (None if t is None else _Guard(t, stall, setting)) for k, t in client._mounts.items()}
        return client

    setter(make)
    _CONFIGURED.append(key)
    return c, stall
