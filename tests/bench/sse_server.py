"""A small OpenAI-compatible streaming server for the bench tests (HTTP/1.1 keep-alive, chunked SSE).

It counts TCP connections and records, per request, when it read the request and when it wrote the
first token (same process, same perf_counter clock as the client), so tests can compare the client's
TTFT with the server's own timing. ``mode`` picks a behaviour: ok, 503, garbage, json (a 200 with a
plain JSON body instead of an event stream).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Stats:
    connections: int = 0
    server_ttft_s: list[float] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(stats: Stats, mode: str, first_s: float, gap_s: float) -> type[BaseHTTPRequestHandler]:
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
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            got = time.perf_counter()
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
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
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

    return H


@contextmanager
def sse_server(mode: str = "ok", first_s: float = 0.03, gap_s: float = 0.005) -> Iterator[tuple[str, Stats]]:
    stats = Stats()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stats, mode, first_s, gap_s))
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", stats
    finally:
        httpd.shutdown()
        httpd.server_close()
        # like a killed server: keep-alive connections die too, not only the listening socket
        for sock in stats.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
