"""toolchain/http.py: the retry/backoff policy, the status-to-error mapping, the deadlines, and the debug log.

Requests go to ``httpx.MockTransport`` handlers (nothing leaves the process) or to a server of our own on
127.0.0.1; waits are recorded, never slept, so no assertion depends on the clock.

What the policy must do is RFC 9110's: section 9.2.2 (idempotent methods: GET, HEAD, PUT, DELETE, OPTIONS,
TRACE; a client may resend those, not a POST whose body went out) and section 10.2.3 (``Retry-After`` is
delay-seconds or an HTTP date); 429 is RFC 6585 section 4 (the request was refused, not processed).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.conftest import Cli
from toolchain import http, logs
from toolchain.errors import HTTPAuthError, HTTPNotFoundError, HTTPUnavailableError, UserInputError


@dataclass(frozen=True)
class Recorded(http.Backoff):
    """The product's policy, with each wait recorded instead of slept."""

    waits: list[float] = field(default_factory=list)

    def wait(self, failures: int, retry_after: str | None = None) -> None:
        self.waits.append(self.delay(failures, retry_after))


def mock(answers: list[Any]) -> tuple[httpx.Client, list[httpx.Request]]:
    """A client whose transport answers each request with the next item: a status code, a (status, headers)
    pair, or an exception class to raise (the way httpx raises a lost or refused connection)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()  # the body goes out, as on a real connection
        seen.append(request)
        item = answers[min(len(seen), len(answers)) - 1]
        if isinstance(item, type) and issubclass(item, httpx.TransportError):
            raise item("simulated", request=request)
        status, headers = item if isinstance(item, tuple) else (item, {})
        return httpx.Response(status, headers=headers, text="ok" if status < 400 else "")

    return httpx.Client(transport=httpx.MockTransport(handler)), seen


URL = "http://registry.example:5000/v2/team/engines/tags/list"


def test_a_503_is_retried_and_the_success_returned() -> None:
    c, seen = mock([503, 503, 200])
    policy = Recorded()
    resp = http.send("GET", URL, client=c, policy=policy)
    assert resp.status_code == 200 and len(seen) == 3
    assert len(policy.waits) == 2
    # exponential, each wait within [full * (1 - jitter), full]
    assert 0.25 <= policy.waits[0] <= 0.5 and 0.5 <= policy.waits[1] <= 1.0


def test_the_backoff_doubles_up_to_its_cap_and_jitter_only_shortens() -> None:
    p = http.Backoff(base=0.5, cap=4.0, jitter=0.5)
    assert [p.delay(n, rand=lambda: 0.0) for n in (1, 2, 3, 4, 5, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [p.delay(n, rand=lambda: 1.0) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]
    assert p.allows(3) and not p.allows(4)  # 4 tries in all


def test_retry_after_is_the_wait_in_seconds_or_until_its_date() -> None:
    c, _ = mock([(429, {"Retry-After": "3"}), (503, {"Retry-After": "0"}), 200])
    policy = Recorded()
    assert http.send("PATCH", URL, client=c, policy=policy).status_code == 503  # a 503 to a PATCH is final
    c, _ = mock([(429, {"Retry-After": "3"}), (503, {"Retry-After": "0"}), 200])
    assert http.send("GET", URL, client=c, policy=policy).status_code == 200
    assert policy.waits == [3.0, 3.0, 0.0]  # the PATCH's 429, then the GET's 429 and 503
    now = datetime(2026, 12, 3, 17, 0, 0, tzinfo=timezone.utc)
    assert http.parse_retry_after("Thu, 03 Dec 2026 17:00:07 GMT", now=now) == 7.0
    assert http.parse_retry_after("Thu, 03 Dec 2026 16:59:00 GMT", now=now) == 0.0
    assert http.parse_retry_after("soon") is None and http.parse_retry_after(None) is None


def test_a_server_asking_for_a_long_wait_gets_the_error_at_once_saying_so() -> None:
    c, seen = mock([(503, {"Retry-After": "3600"}), 200])
    policy = Recorded()
    resp = http.send("GET", URL, client=c, policy=policy)
    assert resp.status_code == 503 and len(seen) == 1 and policy.waits == []
    err = http.status_error(resp, "the tags list", http.Service("registry registry.example:5000", policy=policy))
    assert isinstance(err, HTTPUnavailableError)
    assert "asks to wait 3600 s" in err.message


def test_a_post_whose_body_went_out_is_never_sent_twice() -> None:
    for answers in ([httpx.ReadError, 200], [httpx.RemoteProtocolError, 200], [503, 200], [502, 200]):
        c, seen = mock(answers)
        policy = Recorded()
        service = http.Service("the service", policy=policy)
        try:
            resp = http.send("POST", URL, client=c, content=b'{"x": 1}', policy=policy)
            err = http.status_error(resp, "a POST", service)
        except httpx.TransportError as e:
            err = http.transport_error(e, "a POST", service, URL)
        assert len(seen) == 1 and policy.waits == [], answers
        assert "tries" not in err.message, err.message  # one try, and the message does not claim more
    # the same losses on a GET are tried again
    c, seen = mock([httpx.ReadError, 502, 200])
    assert http.send("GET", URL, client=c, policy=Recorded()).status_code == 200 and len(seen) == 3


def test_a_post_that_could_not_connect_or_was_refused_with_429_is_sent_again() -> None:
    body_made = []

    def body() -> Iterator[bytes]:
        body_made.append(1)
        yield b"chunk"

    c, seen = mock([httpx.ConnectError, (429, {"Retry-After": "1"}), 201])
    assert http.send("POST", URL, client=c, content=body, policy=Recorded()).status_code == 201
    assert len(seen) == 3 and len(body_made) == 3
    assert all(r.content == b"chunk" for r in seen)  # a callable body is made anew for each try


def test_a_caller_may_mark_a_bodiless_post_safe_to_resend() -> None:
    c, seen = mock([503, 202])
    assert http.send("POST", URL, client=c, policy=Recorded(), idempotent=True).status_code == 202
    assert len(seen) == 2


def test_giving_up_after_n_tries_names_the_host_and_the_count() -> None:
    c, seen = mock([503])
    policy = Recorded(attempts=3)
    resp = http.send("GET", URL, client=c, policy=policy)
    assert resp.status_code == 503 and len(seen) == 3 and len(policy.waits) == 2
    err = http.status_error(resp, "the tags list", http.Service("registry registry.example:5000", policy=policy))
    assert isinstance(err, HTTPUnavailableError) and err.exit_code == 75 and err.transient  # EX_TEMPFAIL
    assert err.message == (
        "registry registry.example:5000 answered 503 Service Unavailable to the tags list after 3 tries"
    )
    assert err.hint

    c, seen = mock([httpx.ConnectError])
    with pytest.raises(httpx.ConnectError) as caught:
        http.send("GET", URL, client=c, policy=policy)
    err = http.transport_error(caught.value, "the tags list", http.Service("the registry", policy=policy), URL)
    assert isinstance(err, HTTPUnavailableError)
    assert err.message == "cannot reach the registry (registry.example:5000) for the tags list (ConnectError, 3 tries)"
    assert len(policy.waits) == 4


@pytest.mark.parametrize(
    ("status", "kind", "exit_code", "words"),
    [
        (401, HTTPAuthError, 2, "refused the credentials given for"),
        (403, HTTPAuthError, 2, "denied"),
        (404, HTTPNotFoundError, 2, "answered 404 Not Found to"),
        (429, HTTPUnavailableError, 75, "answered 429 Too Many Requests to"),  # transient: EX_TEMPFAIL
        (500, HTTPUnavailableError, 75, "answered 500 Internal Server Error to"),
    ],
)
def test_statuses_map_to_one_line_errors_with_a_hint(status: int, kind: type, exit_code: int, words: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"message": "multi\nline\tdetail"})

    c = httpx.Client(transport=httpx.MockTransport(handler))
    resp = http.send("GET", URL, client=c, policy=http.ONCE)
    err = http.status_error(resp, "GET of the tags list", http.Service("the service at registry.example"))
    assert type(err) is kind and err.exit_code == exit_code
    assert words in err.message and "registry.example" in err.message
    assert "\n" not in err.message and "multi line detail" in err.message
    assert err.hint and "\n" not in err.hint
    if status == 404:
        assert URL in err.message  # the URL to check


def test_a_caller_s_own_error_family_and_hints_are_used() -> None:
    from toolchain.errors import BenchError

    kinds = http.Kinds(auth=BenchError, missing=BenchError, unavailable=BenchError, other=BenchError)
    service = http.Service("the metrics endpoint", kinds=kinds, hints={404: "check --metrics-url"})
    resp = httpx.Response(404, request=httpx.Request("GET", "http://127.0.0.1:8002/metricz"))
    err = http.status_error(resp, "a scrape", service)
    assert type(err) is BenchError and err.hint == "check --metrics-url"


def test_the_deadlines_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_HTTP_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "17")
    t = http.client().timeout
    assert (t.connect, t.read, t.write, t.pool) == (2.5, 17.0, 17.0, 17.0)
    shared = http._default_client()  # the client of callers that bring none follows a changed setting
    assert shared.timeout.read == 17.0 and http._default_client() is shared
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "4")
    assert http._default_client().timeout.read == 4.0
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "soon")
    with pytest.raises(UserInputError, match="TOOLCHAIN_HTTP_READ_TIMEOUT='soon' is not a positive number"):
        http.client()


def test_get_reads_at_most_the_limit_and_maps_a_refused_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.servers import free_port

    service = http.Service("the test server", policy=Recorded(attempts=2))
    port = free_port()  # nothing listens there
    with pytest.raises(HTTPUnavailableError, match=rf"cannot reach the test server \(127.0.0.1:{port}\)"):
        http.get(f"http://127.0.0.1:{port}/x", "a probe", service)
    big = b"x" * 8 * 2**20
    with serving(lambda h: h.answer(200, big)) as base:
        assert 10 < len(http.get(base + "/big", "a probe", service, limit=10)) < len(big)  # one read past the limit
        assert http.get(base + "/big", "a probe", service) == big


def test_redact_drops_credentials_and_secret_query_values() -> None:
    url = "https://user:hunter2@storage.example/blob?X-Amz-Signature=abc&X-Amz-Credential=AKIA&digest=sha256:1&token=t"
    shown = http.redact(url)
    assert shown == "https://storage.example/blob?X-Amz-Signature=***&X-Amz-Credential=***&digest=sha256:1&token=***"
    assert logs.redact_argv(["oras", "login", "--password", "p1", "--token=p2", "-u", "me"]) == [
        "oras",
        "login",
        "--password",
        "***",
        "--token=***",
        "-u",
        "me",
    ]


# --- the debug log ----------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    route: Callable[[_Handler], None]

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        type(self).route(self)

    def log_message(self, *args: Any) -> None:
        pass


class serving:
    """A 127.0.0.1 HTTP server whose every GET is answered by ``route``; the base URL while it runs."""

    def __init__(self, route: Callable[[_Handler], None]) -> None:
        handler = type("H", (_Handler,), {"route": staticmethod(route)})
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def debug_off_after() -> Iterator[None]:
    yield
    logs.configure(False)


def test_nothing_is_logged_without_toolchain_debug(capsys: pytest.CaptureFixture[str], debug_off_after: None) -> None:
    from toolchain import proc

    assert logs.configure() is False
    c, _ = mock([200])
    http.send("GET", URL, client=c)
    proc.capture(["true"], timeout=30)
    assert capsys.readouterr().err == ""


def test_the_debug_log_has_each_try_and_each_process_and_no_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, debug_off_after: None
) -> None:
    from toolchain import proc

    monkeypatch.setenv("TOOLCHAIN_DEBUG", "1")
    assert logs.configure() is True
    c, _ = mock([503, 200])
    secret_url = "http://me:hunter2@registry.example:5000/v2/x/blobs/uploads/1?_state=s3cr3t&digest=sha256:9"
    http.send("GET", secret_url, client=c, headers={"Authorization": "Bearer tok-XYZ"}, policy=Recorded())
    proc.capture(["sh", "-c", "exit 3", "--password", "pw-ABC"], timeout=30)
    err = capsys.readouterr().err
    lines = err.splitlines()
    tries = [ln for ln in lines if ln.startswith("debug toolchain.http: GET http://registry.example:5000/v2/x/")]
    assert len(tries) == 2, err
    assert "-> 503 in " in tries[0] and "(try 1, will retry)" in tries[0]
    assert "-> 200 in " in tries[1] and "(try 2)" in tries[1]
    assert "_state=***&digest=sha256:9" in tries[0]
    started = [ln for ln in lines if ln.startswith("debug toolchain.proc: started pid ")]
    assert len(started) == 1 and "sh -c 'exit 3' --password '***'" in started[0], err
    pid = started[0].split()[4].rstrip(":")
    assert f"debug toolchain.proc: pid {pid} exited with code 3" in lines
    for secret in ("hunter2", "tok-XYZ", "s3cr3t", "pw-ABC", "Authorization"):
        assert secret not in err


class _FakeRegistry:
    """A registry of our own on 127.0.0.1 that wants Basic auth for its token service and a Bearer token for
    the API (the distribution token flow), and holds an empty repository."""

    USER, PASSWORD, TOKEN = "robot", "pa55-w0rd-SECRET", "bearer-TOKEN-SECRET"

    def route(self, h: _Handler) -> None:
        basic = "Basic " + base64.b64encode(f"{self.USER}:{self.PASSWORD}".encode()).decode()
        auth = h.headers.get("Authorization", "")
        if h.path.startswith("/token"):
            if auth != basic:
                return h.answer(401)
            return h.answer(200, json.dumps({"token": self.TOKEN}).encode(), {"Content-Type": "application/json"})
        if auth != f"Bearer {self.TOKEN}":
            realm = f'Bearer realm="http://{h.headers["Host"]}/token",service="fake"'
            return h.answer(401, b"", {"WWW-Authenticate": realm})
        if h.path.endswith("/tags/list"):
            return h.answer(200, b'{"name": "team/engines", "tags": []}', {"Content-Type": "application/json"})
        return h.answer(404, b'{"errors": [{"code": "NAME_UNKNOWN"}]}')


def test_cli_debug_log_of_a_registry_session_shows_requests_never_credentials(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, debug_off_after: None
) -> None:
    reg = _FakeRegistry()
    with serving(reg.route) as base:
        host = base.removeprefix("http://")
        monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
        monkeypatch.setenv("TOOLCHAIN_OCI_USERNAME", reg.USER)
        monkeypatch.setenv("TOOLCHAIN_OCI_PASSWORD", reg.PASSWORD)
        monkeypatch.setenv("TOOLCHAIN_DEBUG", "1")
        r = cli("cache", "ls", "--registry", f"oci://{host}/team/engines")
        assert r.exit_code == 0, r.output
        debug = [ln for ln in r.stderr.splitlines() if ln.startswith("debug toolchain.http: ")]
        assert any(f"GET {base}/v2/team/engines/tags/list -> 401" in ln for ln in debug), r.stderr
        assert any(f"GET {base}/token?" in ln and "-> 200" in ln for ln in debug), r.stderr
        assert any(f"GET {base}/v2/team/engines/tags/list -> 200" in ln for ln in debug), r.stderr
        basic = base64.b64encode(f"{reg.USER}:{reg.PASSWORD}".encode()).decode()
        for secret in (reg.PASSWORD, reg.TOKEN, basic):
            assert secret not in r.output and secret not in r.stderr

        monkeypatch.delenv("TOOLCHAIN_DEBUG")
        r = cli("cache", "ls", "--registry", f"oci://{host}/team/engines")
        assert r.exit_code == 0 and "debug " not in r.stderr, r.stderr


def test_the_load_generator_s_server_check_uses_the_one_mapping() -> None:
    """bench keeps its own async client for the timed requests; its up-front check maps a failure the same way."""
    import asyncio

    from toolchain.bench.loadgen import OpenAITarget
    from toolchain.errors import BenchError

    async def check(url: str) -> None:
        target = OpenAITarget(url, "m", chat=False, timeout=10)
        try:
            await target.check()
        finally:
            await target.close()

    overloaded = serving(lambda h: h.answer(503, b'{"message": "engine overloaded"}'))
    with overloaded as base, pytest.raises(BenchError) as caught:
        asyncio.run(check(base))
    assert caught.value.message == (
        f"the server at {base} answered 503 Service Unavailable to GET /v1/models (engine overloaded)"
    )


def test_a_url_the_client_cannot_speak_is_not_retried() -> None:
    c, seen = mock([httpx.UnsupportedProtocol, 200])
    policy = Recorded()
    with pytest.raises(httpx.UnsupportedProtocol):
        http.send("GET", URL, client=c, policy=policy)
    assert len(seen) == 1 and policy.waits == []


def test_a_client_this_module_does_not_drive_logs_through_its_hooks(
    capsys: pytest.CaptureFixture[str], debug_off_after: None
) -> None:
    """huggingface_hub's client gets these hooks (toolchain/registry/backends.py): its requests show up alike."""
    logs.configure(True)
    c = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(204)), event_hooks=http.log_hooks())
    c.get("https://hub.example/api/models/x?token=hf_SECRET", headers={"Authorization": "Bearer hf_SECRET"})
    err = capsys.readouterr().err
    assert "debug toolchain.http: GET https://hub.example/api/models/x?token=*** -> 204 in " in err, err
    assert "hf_SECRET" not in err


def test_a_probe_leaves_no_connection_open() -> None:
    """Measured before: the readiness probes left a pooled keep-alive connection to tritonserver's HTTP port, and
    its shutdown then waited for it ("Timeout 30: Found 1 HTTP service connections") past the 10 s a server is
    given to stop, so every stop ended in SIGKILL after 10 s."""
    import http.server
    import threading

    from tests.helpers import wait_for
    from toolchain import http as H

    open_now = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive unless the client says otherwise

        def handle(self) -> None:
            open_now[0] += 1
            try:
                super().handle()
            finally:
                open_now[0] -= 1

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        resp = H.probe("GET", f"http://127.0.0.1:{srv.server_port}/v2/health/ready", timeout=5)
        assert resp is not None and resp.status_code == 200
        assert wait_for(lambda: open_now[0] == 0, 10), "the probe's connection stayed open"
    finally:
        srv.shutdown()
        srv.server_close()
