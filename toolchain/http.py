"""The product's one HTTP client: httpx, one retry/backoff policy, one status-to-error mapping, debug logging.

Every HTTP request the toolchain itself makes (OCI registries and their token services, Triton's and Dynamo's
readiness and repository endpoints, Prometheus scrapes) goes through :func:`send`. Out of this module's scope,
on purpose: the benchmark load generator's request path (``toolchain/bench/loadgen.py``: its own async client,
its timing must not change), tritonclient (gRPC), boto3 (botocore's own retry mode; its deadlines come from the
same settings, ``toolchain.registry.backends``) and huggingface_hub (its own client and backoff; its deadlines and
the debug log hooks are set through the library's client factory).

Retries (:class:`Backoff`): a bounded number of tries; between two, an exponential delay with jitter, or what the
server's ``Retry-After`` asks (seconds or an HTTP date) when it is not longer than the policy's ``max_wait`` (a
server asking for longer is answered with the error at once). A request is sent again on

* a connection that could not be made (nothing was sent: any method),
* 429 Too Many Requests (the server refused before doing anything: any method),
* a lost connection or a 500/502/503/504 answer, for an idempotent method only (GET, HEAD, PUT, DELETE,
  OPTIONS; RFC 9110 section 9.2.2) or a request the caller marks ``idempotent=True`` (an OCI upload session's
  ``POST``, which has no body and whose duplicate the registry drops). A ``POST``/``PATCH`` whose body went out is
  never sent twice.

Errors (:func:`status_error`, :func:`transport_error`): 401/403 are the user's to fix (credentials, exit 2), 404
names the URL to check, 429/5xx say the service is failing or overloaded and how many tries were made, and a
connection that could not be made names the host; each one line with a hint, like huggingface_hub's
``hf_raise_for_status`` does for the Hub. A caller with its own error family (the registry's) passes it as
:class:`Kinds`.

Deadlines: ``TOOLCHAIN_HTTP_CONNECT_TIMEOUT`` and ``TOOLCHAIN_HTTP_READ_TIMEOUT`` (:func:`timeouts`), unless a call
gives its own (a readiness probe waits a second).

Logging: each try is logged at DEBUG on the ``toolchain.http`` logger (method, URL without credentials or secret
query values, status or error, elapsed seconds, try number); the CLI shows it on stderr under
``TOOLCHAIN_DEBUG=1`` (``toolchain.logs``). Headers are never logged, so neither is ``Authorization``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from toolchain import redact as _redact
from toolchain import settings
from toolchain.errors import (
    HTTPAuthError,
    HTTPError,
    HTTPNotFoundError,
    HTTPUnavailableError,
    ToolchainError,
    UserInputError,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("toolchain.http")

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})  # RFC 9110 section 9.2.2
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

Body = bytes | Callable[[], Iterable[bytes]] | None  # a callable body is made anew for each try


@dataclass(frozen=True)
class Backoff:
    """How often and how long to try again: ``attempts`` tries in all; before try n+1, ``base * 2**(n-1)``
    seconds (at most ``cap``), less up to ``jitter`` of it at random, so that clients that failed together do
    not come back together; a ``Retry-After`` up to ``max_wait`` seconds is waited as asked."""

    attempts: int = 4
    base: float = 0.5
    cap: float = 8.0
    jitter: float = 0.5
    max_wait: float = 30.0
    retry_stalls: bool = True  # False: a read or write that timed out ends the tries (the peer stopped answering)

    def delay(
        self, failures: int, retry_after: str | None = None, *, rand: Callable[[], float] = random.random
    ) -> float:
        """Seconds to wait after the ``failures``-th failed try (1, 2, ...); ``retry_after`` is the server's header."""
        asked = parse_retry_after(retry_after)
        if asked is not None:
            return asked
        full = min(self.cap, self.base * 2.0 ** (failures - 1))
        return full * (1.0 - self.jitter * rand())

    def allows(self, failures: int, retry_after: str | None = None) -> bool:
        """Whether another try follows the ``failures``-th failed one (the server's wait is not too long)."""
        asked = parse_retry_after(retry_after)
        return failures < self.attempts and (asked is None or asked <= self.max_wait)

    def wait(self, failures: int, retry_after: str | None = None) -> None:
        time.sleep(self.delay(failures, retry_after))


DEFAULT = Backoff()
ONCE = Backoff(attempts=1)  # probes polled by their caller (readiness): one try each


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 section 10.2.3) as seconds from now: delay-seconds or an HTTP date; None when
    absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def timeouts() -> tuple[float, float]:
    """(connect, read) seconds from ``TOOLCHAIN_HTTP_CONNECT_TIMEOUT``/``TOOLCHAIN_HTTP_READ_TIMEOUT``; a bad value
    is a one-line user error."""
    try:
        return settings.http_timeouts()
    except ValueError as e:
        raise UserInputError(str(e), "set it to seconds, e.g. 30 (or unset it for the default)") from e


def client(
    *,
    headers: Mapping[str, str] | None = None,
    follow_redirects: bool = True,
    transport: Any = None,
    read: float | None = None,
) -> httpx.Client:
    """An httpx client with the configured deadlines (``read``: a shorter read deadline of the caller's). Redirects
    are followed (registries send blobs to storage); httpx drops ``Authorization`` when a redirect leaves the
    origin."""
    import httpx  # a core dependency, imported when first needed so `toolchain --help` stays light

    connect, configured = timeouts()
    read = configured if read is None else read
    return httpx.Client(
        timeout=httpx.Timeout(read, connect=connect),
        follow_redirects=follow_redirects,
        headers=dict(headers or {}),
        transport=transport,
    )


_shared: list[Any] = []  # [(connect, read), client]: the client of the module-level helpers
_shared_lock = threading.Lock()  # a benchmark's sampler thread scrapes while the main thread does


def _default_client() -> httpx.Client:
    """One pooled client for callers that bring none, remade when the deadline settings change."""
    deadlines = timeouts()
    with _shared_lock:
        if not _shared or _shared[0] != deadlines:
            if _shared:
                _shared[1].close()
            _shared[:] = [deadlines, client(headers={"User-Agent": "toolchain/1"})]
        c: httpx.Client = _shared[1]
        return c


def redact(url: object) -> str:
    """``url`` as it may be logged (``toolchain.redact.url``): no user name or password, and the value of every
    query parameter that could be a secret (a token, a signature of a presigned URL, an upload's state) hidden."""
    return _redact.url(url)


def _unsent(e: BaseException) -> bool:
    """Whether a transport error happened before any byte of the request left (so any method may be resent)."""
    import httpx

    return isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def send(
    method: str,
    url: str,
    *,
    client: httpx.Client | None = None,
    headers: Mapping[str, str] | None = None,
    content: Body = None,
    params: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stream: bool = False,
    policy: Backoff = DEFAULT,
    idempotent: bool | None = None,
    observe: Callable[[httpx.Response], None] | None = None,
) -> httpx.Response:
    """Send one request under ``policy`` (module docstring) and return the last response, whatever its status
    (a streamed one: the caller closes it). A transport error that ends the tries is raised as httpx's own
    exception, for the caller to translate (:func:`transport_error`). ``observe`` sees every answer, retried
    ones included."""
    import httpx

    c = client if client is not None else _default_client()
    method = method.upper()
    safe = method in IDEMPOTENT if idempotent is None else idempotent
    extra: dict[str, Any] = {} if timeout is None else {"timeout": httpx.Timeout(timeout)}
    failures = 0
    while True:
        body = content() if callable(content) else content
        req = c.build_request(method, url, headers=dict(headers or {}), content=body, params=params, **extra)
        t0 = time.monotonic()
        try:
            resp = c.send(req, stream=stream)
        except httpx.TransportError as e:
            failures += 1
            # a URL this client cannot speak or a request it could not form fails the same way every time
            hopeless = isinstance(e, (httpx.UnsupportedProtocol, httpx.LocalProtocolError))
            hopeless = hopeless or (not policy.retry_stalls and isinstance(e, (httpx.ReadTimeout, httpx.WriteTimeout)))
            again = not hopeless and (safe or _unsent(e)) and policy.allows(failures)
            _log_try(req, f"{type(e).__name__}", t0, failures, again)
            if not again:
                vars(e)["toolchain_tries"] = failures  # for the error message (tries_of)
                raise
            policy.wait(failures)
            continue
        resp.extensions["toolchain_tries"] = failures + 1  # for the error message: how many tries it took
        if observe is not None:
            observe(resp)
        retry_after = resp.headers.get("Retry-After")
        retryable = resp.status_code in RETRY_STATUS and (safe or resp.status_code == 429)
        again = retryable and policy.allows(failures + 1, retry_after)
        _log_try(req, str(resp.status_code), t0, failures + 1, again)
        if not again:
            return resp
        failures += 1
        resp.close()
        policy.wait(failures, retry_after)


def _log_try(req: httpx.Request, outcome: str, t0: float, attempt: int, again: bool) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "%s %s -> %s in %.3f s (try %d%s)",
            req.method,
            redact(req.url),
            outcome,
            time.monotonic() - t0,
            attempt,
            ", will retry" if again else "",
        )


def log_hooks() -> dict[str, list[Callable[..., None]]]:
    """httpx event hooks that log each response of a client this module does not drive (huggingface_hub's) the way
    :func:`send` logs its own."""

    def on_request(req: httpx.Request) -> None:
        req.extensions["toolchain_t0"] = time.monotonic()

    def on_response(resp: httpx.Response) -> None:
        t0 = resp.request.extensions.get("toolchain_t0", time.monotonic())
        _log_try(resp.request, str(resp.status_code), t0, 1, False)

    return {"request": [on_request], "response": [on_response]}


# --- status and transport errors ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kinds:
    """The error types a caller's failures are raised as: the registry has its own family, the rest use the
    generic ``HTTP*Error`` types of ``toolchain.errors``."""

    auth: type[ToolchainError] = HTTPAuthError
    missing: type[ToolchainError] = HTTPNotFoundError
    unavailable: type[ToolchainError] = HTTPUnavailableError
    other: type[ToolchainError] = HTTPError


GENERIC = Kinds()


@dataclass(frozen=True)
class Service:
    """Who answers, for the messages: ``name`` is e.g. 'registry ghcr.io' or 'the metrics endpoint at URL';
    ``hints`` override the default hint per status (0: a connection that could not be made; 500: any 5xx);
    ``detail`` reads the service's own error body (an OCI registry's ``{"errors": [...]}``)."""

    name: str
    kinds: Kinds = GENERIC
    hints: Mapping[int, str] = field(default_factory=dict)
    policy: Backoff = DEFAULT
    detail: Callable[[httpx.Response], str] | None = None


def _detail(resp: httpx.Response) -> str:
    """A short, one-line excerpt of an error body (a JSON ``message``/``error`` or the text), '' when none."""
    try:
        raw = resp.content[:2000]
    except Exception:
        return ""
    text = raw.decode("utf-8", "replace").strip()
    try:
        import json

        data = json.loads(text)
        if isinstance(data, dict):
            for k in ("message", "error", "detail"):
                if isinstance(data.get(k), str):
                    text = data[k]
                    break
    except ValueError:
        pass
    text = " ".join(text.split())
    if text.lstrip().startswith("<"):  # an HTML error page says nothing a line can hold
        return ""
    return text[:160] + ("..." if len(text) > 160 else "")


def status_error(resp: httpx.Response, what: str, service: Service) -> ToolchainError:
    """The one-line error for an answer that is not what ``what`` (e.g. 'GET of manifest x') needed."""
    code = resp.status_code
    reason = resp.reason_phrase or ""
    detail = (service.detail or _detail)(resp)
    tail = f" ({detail})" if detail else ""
    k, hints = service.kinds, service.hints
    if code in (401, 403):
        verb = "refused the credentials given for" if code == 401 else "denied"
        return k.auth(
            f"{service.name} {verb} {what} ({code}){tail}",
            hints.get(code, "check the credentials (and that they grant this access), then try again"),
        )
    if code == 404:
        shown = redact(resp.request.url)
        at = "" if shown in service.name else f" ({shown})"
        return k.missing(f"{service.name} answered 404 {reason} to {what}{at}{tail}", hints.get(404, "check the URL"))
    if code == 429 or code >= 500:
        after = resp.headers.get("Retry-After")
        asked = parse_retry_after(after)
        wait = f"; it asks to wait {asked:g} s" if asked is not None and asked > service.policy.max_wait else ""
        n = resp.extensions.get("toolchain_tries", 1)
        tries = f" after {n} tries" if n > 1 else ""
        return k.unavailable(
            f"{service.name} answered {code} {reason} to {what}{tries}{wait}{tail}",
            hints.get(500 if code >= 500 else 429, "the service is failing or overloaded: try again later"),
        )
    return k.other(f"{service.name} answered {code} {reason} to {what}{tail}", hints.get(code))


_TRANSPORT_ERRORS = frozenset(
    {
        ("httpx", "TransportError"),  # ConnectError, timeouts, a lost connection (not UnsupportedProtocol: below)
        ("requests.exceptions", "ConnectionError"),
        ("requests.exceptions", "Timeout"),
        ("urllib3.exceptions", "NewConnectionError"),
        ("urllib3.exceptions", "MaxRetryError"),
        ("urllib3.exceptions", "TimeoutError"),
        ("botocore.exceptions", "EndpointConnectionError"),
        ("botocore.exceptions", "ConnectTimeoutError"),
        ("botocore.exceptions", "ReadTimeoutError"),
    }
)
# permanent whatever they subclass: a URL no client speaks, a request that cannot be formed, offline by setting
_PERMANENT = frozenset({"UnsupportedProtocol", "LocalProtocolError", "InvalidURL", "OfflineModeIsEnabled"})


def transient(e: BaseException) -> bool:
    """Whether a failure may pass if tried again later (exit 75, ``toolchain.errors.TransientError``): a
    connection refused or reset, a timeout, an answer 429 or 5xx, found in ``e`` or the exceptions it was raised
    from (huggingface_hub wraps the connection error it met). A 4xx answer, a URL no client speaks, an offline
    setting and anything else are permanent."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ToolchainError):
            return cur.transient
        names = {
            (c.__module__.split(".")[0] if c.__module__.startswith("httpx") else c.__module__, c.__name__)
            for c in type(cur).__mro__
        }
        if any(n in _PERMANENT for _, n in names):
            return False
        if names & _TRANSPORT_ERRORS or isinstance(cur, (ConnectionError, TimeoutError)):
            return True
        code = getattr(getattr(cur, "response", None), "status_code", None)
        if isinstance(code, int):
            return code == 429 or code >= 500
        cur = cur.__cause__ or cur.__context__
    return False


def tries_of(e: BaseException) -> int:
    """How many tries :func:`send` made before it gave up with ``e`` (1 for an exception it did not raise)."""
    n = vars(e).get("toolchain_tries", 1) if hasattr(e, "__dict__") else 1
    return n if isinstance(n, int) else 1


def transport_error(e: BaseException, what: str, service: Service, url: object | None = None) -> ToolchainError:
    """The one-line error for a request that never got an answer (refused, timed out, broken), naming the host."""
    import httpx

    where = httpx.URL(str(url)).netloc.decode() if url is not None else ""
    at = f" ({where})" if where and where not in service.name else ""
    n = tries_of(e)
    tries = f", {n} tries" if n > 1 else ""
    if isinstance(e, httpx.TimeoutException) and not _unsent(e):
        message = f"{service.name}{at} stopped answering {what} ({type(e).__name__}{tries})"
        hint = "raise TOOLCHAIN_HTTP_READ_TIMEOUT if it is only slow, or check its health"
    else:
        message = f"cannot reach {service.name}{at} for {what} ({type(e).__name__}{tries})"
        hint = "check the host, the port and the network"
    return service.kinds.unavailable(message, service.hints.get(0, hint))


def get(url: str, what: str, service: Service, *, timeout: float | None = None, limit: int | None = None) -> bytes:
    """GET ``url`` under the service's policy; its body (at most ``limit`` bytes, one more tells it was longer),
    or the mapped one-line error."""
    import httpx

    try:
        resp = send("GET", url, timeout=timeout, stream=True, policy=service.policy)
    except httpx.RequestError as e:  # a transport error after the tries, a redirect loop
        raise transport_error(e, what, service, url) from e
    except httpx.InvalidURL as e:
        raise service.kinds.other(f"{redact(url)!r} is not a URL {service.name} answers at ({e})") from e
    try:
        if resp.status_code != 200:
            resp.read()
            raise status_error(resp, what, service)
        chunks: list[bytes] = []
        got = 0
        try:
            for b in resp.iter_bytes():
                chunks.append(b)
                got += len(b)
                if limit is not None and got > limit:
                    break
        except httpx.RequestError as e:
            raise transport_error(e, what, service, url) from e
        return b"".join(chunks)
    finally:
        resp.close()


def probe(
    method: str, url: str, *, timeout: float, content: bytes | None = None, json: object = None
) -> httpx.Response | None:
    """One try of a request polled by its caller (readiness, warm-up): the response read whole, or None when
    nothing answered. The connection is closed after it (``Connection: close``): a pooled keep-alive connection
    left open makes tritonserver's shutdown wait for it (its HTTP service counts open connections for up to
    30 s), which is longer than a server is given to stop."""
    import httpx

    headers: dict[str, str] = {"Connection": "close"}
    if json is not None:
        import json as _json

        content = _json.dumps(json).encode()
        headers["content-type"] = "application/json"
    try:
        resp = send(method, url, headers=headers, content=content, timeout=timeout, policy=ONCE)
    except (httpx.RequestError, httpx.InvalidURL):
        return None
    return resp
