"""A small HTTP server on 127.0.0.1 in front of the real test registry (or in place of one) for OCI fault tests.

Modes: ``status`` answers every request with one status (a registry that says 401/403/404/5xx); ``bearer``
is a token server and gate in front of the registry, as Harbor/GHCR/ECR put one: a request without a valid
token gets ``401 WWW-Authenticate: Bearer realm=...``, ``/token`` hands out tokens for Basic credentials
(pull or pull+push scope), and writes need a push token; ``cut_blob_once`` breaks the first blob download
half-way (the client must resume with ``Range``); ``cut_patch_once`` drops the first chunk upload after
the registry has seen part of it (the client must ask the upload's status and resume).
"""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "authorization", "content-length", "host"}


@dataclass
class ProxyState:
    upstream: str | None = None  # host:port of the real registry
    status: int | None = None
    users: dict[str, str] = field(default_factory=dict)  # bearer mode: user -> password
    tokens: dict[str, set[str]] = field(default_factory=dict)  # token -> granted actions
    cut_blob_once: bool = False
    cut_patch_once: bool = False
    no_patch: bool = False  # answer 405 to every PATCH (a registry without chunked uploads)
    fail_range_once: bool = False  # answer 503 to the first ranged blob GET (a registry failing on the resume)
    fail_upload_put: bool = False  # answer 500 to every PUT that closes a blob upload (its session stays open)
    log: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # (method, path, headers)
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _state(self) -> ProxyState:
        st: ProxyState = self.server.state
        return st

    def _reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        st = self._state()
        with st.lock:
            st.log.append((self.command, self.path, dict(self.headers.items())))
        body = self._body()
        if st.status is not None:
            errs = {401: "UNAUTHORIZED", 403: "DENIED", 404: "NOT_FOUND"}
            code = errs.get(st.status, "UNKNOWN")
            payload = json.dumps({"errors": [{"code": code, "message": f"fake {st.status}"}]}).encode()
            hdrs = {"Content-Type": "application/json"}
            if st.status == 401:
                hdrs["WWW-Authenticate"] = 'Basic realm="fake"'
            self._reply(st.status, b"" if st.status == 404 else payload, hdrs)
            return
        if self.command == "PUT" and st.fail_upload_put and "/blobs/uploads/" in self.path:
            self._reply(500, b'{"errors":[{"code":"UNKNOWN","message":"storage failed"}]}')
            return
        if self.command == "PATCH" and st.no_patch:
            self._reply(405, b'{"errors":[{"code":"UNSUPPORTED","message":"no chunked uploads"}]}')
            return
        if self.command == "GET" and "Range" in self.headers and "/blobs/" in self.path:
            with st.lock:
                fail, st.fail_range_once = st.fail_range_once, False
            if fail:
                self._reply(503, b'{"errors":[{"code":"UNAVAILABLE","message":"busy"}]}')
                return
        if st.users:
            if self.path.startswith("/token"):
                self._token()
                return
            if not self._authorized():
                return
        self._forward(body)

    def _token(self) -> None:
        st = self._state()
        q = parse_qs(urlsplit(self.path).query)
        auth = self.headers.get("Authorization", "")
        with st.lock:
            st.token_requests.append({"scope": q.get("scope", []), "basic": bool(auth)})
        try:
            user, _, password = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        except ValueError:
            user, password = "", ""
        if not auth or st.users.get(user) != password:
            self._reply(401, b'{"details":"bad credentials"}', {"Content-Type": "application/json"})
            return
        actions: set[str] = set()
        for scope in q.get("scope", []):
            actions |= set(scope.rsplit(":", 1)[-1].split(","))
        token = secrets.token_hex(16)
        with st.lock:
            st.tokens[token] = actions
        self._reply(200, json.dumps({"token": token, "expires_in": 300}).encode(), {"Content-Type": "application/json"})

    def _authorized(self) -> bool:
        st = self._state()
        auth = self.headers.get("Authorization", "")
        granted = st.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        need = "pull" if self.command in ("GET", "HEAD") else "push"
        if granted is not None and need in granted:
            return True
        host = self.headers.get("Host", "")
        repo = self.path.split("/v2/", 1)[-1].rsplit("/blobs/", 1)[0].rsplit("/manifests/", 1)[0]
        repo = repo.rsplit("/tags/", 1)[0]
        scope = f"repository:{repo}:{'pull' if need == 'pull' else 'pull,push'}"
        challenge = f'Bearer realm="http://{host}/token",service="fake-registry",scope="{scope}"'
        err = json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}).encode()
        self._reply(401, err, {"WWW-Authenticate": challenge, "Content-Type": "application/json"})
        return False

    def _forward(self, body: bytes) -> None:
        st = self._state()
        assert st.upstream is not None
        host, port = st.upstream.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Host"] = self.headers.get("Host", st.upstream)  # the registry builds Locations from it
        cut_patch = False
        if self.command == "PATCH" and st.cut_patch_once and len(body) > 2:
            with st.lock:
                cut_patch, st.cut_patch_once = True, False
        if cut_patch:  # the registry gets the first half of the chunk, the client a dropped connection
            half = body[: len(body) // 2]
            start = int(headers.get("Content-Range", "0-0").split("-")[0])
            headers["Content-Range"] = f"{start}-{start + len(half) - 1}"
            conn.request("PATCH", self.path, body=half, headers={**headers, "Content-Length": str(len(half))})
            conn.getresponse().read()
            conn.close()
            self.close_connection = True
            self.connection.close()
            return
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = False
        if self.command == "GET" and "/blobs/sha256:" in self.path and "Range" not in self.headers and len(data) > 1024:
            with st.lock:
                cut, st.cut_blob_once = st.cut_blob_once, False
        if cut:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.close()
            return
        self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@contextmanager
def proxy(state: ProxyState) -> Iterator[str]:
    """Serve ``state`` on 127.0.0.1; yields host:port. Stopped on exit."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.state = state  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
