"""A small OpenAI-compatible streaming server for the bench tests (HTTP/1.1 keep-alive, chunked SSE).

It counts TCP connections and records, per request, when it read the request and when it wrote the
first token (same process, same perf_counter clock as the client), so tests can compare the client's
TTFT with the server's own timing. ``mode`` picks a behaviour: ok, 503, garbage, json (a 200 with a
plain JSON body instead of an event stream).

``slots`` gives it a fixed number of decode slots: a request beyond them waits (before its first token)
until one frees, so the highest concurrency that meets a TTFT SLO between the unloaded and the queued
TTFT is exactly ``slots``. Every request's arrival (perf_counter when it was read) and prompt are logged.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Stats:
    connections: int = 0
    server_ttft_s: list[float] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrivals: list[float] = field(default_factory=list)  # perf_counter when each POST was read
    prompts: list[str] = field(default_factory=list)
    busy_max: int = 0  # most requests decoding at once
    kill: Any = None  # stop the server now, as if it were killed (listening socket and live connections)


def _handler(stats: Stats, mode: str, first_s: float, gap_s: float, slots: int | None) -> type[BaseHTTPRequestHandler]:
    gate = threading.BoundedSemaphore(slots) if slots else None
    busy = [0]

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # as production servers do (uvicorn, Triton): small SSE writes must not wait for delayed ACKs
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with stats.lock:
                stats.connections += 1
                stats.sockets.append(self.connection)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_GET(self) -> None:
            body = b'{"data": []}'
            if self.path == "/stats":  # what the server saw, for a test running it in another process
                with stats.lock:
                    body = json.dumps(
                        {
                            "arrivals": stats.arrivals,
                            "prompts": stats.prompts,
                            "busy_max": stats.busy_max,
                            "server_ttft_s": stats.server_ttft_s,
                            "connections": stats.connections,
                        }
                    ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            got = time.perf_counter()
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stats.lock:
                stats.arrivals.append(got)
                stats.prompts.append(str(req.get("prompt", "")))
            if mode == "503":
                body = b'{"error": "overloaded"}'
                self.send_response(503, "Service Unavailable")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if mode == "json":
                body = b'{"choices": [{"text": "all at once"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if gate is not None:
                gate.acquire()
            try:
                with stats.lock:
                    busy[0] += 1
                    stats.busy_max = max(stats.busy_max, busy[0])
                self._generate(req, got)
            finally:
                with stats.lock:
                    busy[0] -= 1
                if gate is not None:
                    gate.release()
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _generate(self, req: dict[str, Any], got: float) -> None:
            time.sleep(first_s)
            if mode == "garbage":
                self._chunk(b"data: <html>oops</html>\n\n")
            else:
                for i in range(req["max_tokens"]):
                    if i:
                        time.sleep(gap_s)
                    self._chunk(f"data: {json.dumps({'choices': [{'text': f' w{i}'}]})}\n\n".encode())
                    if i == 0:
                        with stats.lock:
                            stats.server_ttft_s.append(time.perf_counter() - got)
                usage = {"choices": [], "usage": {"completion_tokens": req["max_tokens"], "prompt_tokens": 3}}
                self._chunk(f"data: {json.dumps(usage)}\n\n".encode())

    return H


@contextmanager
def sse_server(
    mode: str = "ok", first_s: float = 0.03, gap_s: float = 0.005, slots: int | None = None
) -> Iterator[tuple[str, Stats]]:
    stats = Stats()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stats, mode, first_s, gap_s, slots))
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    dead = threading.Event()

    def kill() -> None:
        if dead.is_set():
            return
        dead.set()
        httpd.shutdown()
        httpd.server_close()
        # like a killed server: keep-alive connections die too, not only the listening socket
        with stats.lock:
            socks = list(stats.sockets)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    stats.kill = kill
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", stats
    finally:
        kill()


@contextmanager
def sse_server_process(
    mode: str = "ok", first_s: float = 0.03, gap_s: float = 0.005, slots: int | None = None
) -> Iterator[tuple[str, Callable[[], dict[str, Any]], subprocess.Popen[str]]]:
    """The same server in its own process (no GIL shared with the client under test): its URL, a function
    that fetches what it saw (GET /stats; its perf_counter is the client's clock, CLOCK_MONOTONIC), and the
    process (kill it to kill the server)."""
    args = [sys.executable, "-m", "tests.bench.sse_server", mode, str(first_s), str(gap_s), str(slots or 0)]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=root, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the test server did not start: {url!r}")

        def fetch() -> dict[str, Any]:
            with urllib.request.urlopen(url + "/stats", timeout=10) as r:
                data: dict[str, Any] = json.loads(r.read())
            return data

        yield url, fetch, proc
    finally:
        proc.kill()
        proc.wait(10)


def _serve_forever(mode: str, first_s: float, gap_s: float, slots: int) -> None:
    with sse_server(mode, first_s, gap_s, slots or None) as (url, _):
        print(url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    _serve_forever(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
