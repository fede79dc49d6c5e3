"""Servers on 127.0.0.1 that misbehave on purpose, for the bench deadline and error-kind tests.

``stall_http(mode)``: an OpenAI-compatible endpoint that answers ``GET /v1/models`` (so bench's pre-flight
check passes) and then, for every ``POST``, does what ``mode`` says:

- ``silent``: reads the request and never sends a byte;
- ``headers``: sends the 200 headers of an event stream, then nothing;
- ``trickle``: sends the headers, then one byte every ``TRICKLE_S`` seconds forever (a valid SSE comment
  line grows a byte at a time, so every read gets something and an idle timeout never fires);
- ``mid-body``: sends the headers and one valid completion event, then stalls;
- ``close-mid-body``: sends the headers and one event, then closes the connection;
- ``wrong-shape``: a valid event stream of valid JSON whose ``choices`` is a number.

``stall_triton(mode)``: a Triton-protocol gRPC server (tritonclient's own service stubs) with a decoupled
model ``m`` (text_input, max_tokens, stream in; text_output out) whose stream does what ``mode`` says:
``silent`` (never answers), ``trickle`` (a text_output every ``TRICKLE_S`` s, never final), ``ok`` (3 pieces
and a final response), ``config-silent`` (live, but never answers the model-config request bench asks
first); ``stop()`` kills the server mid-run, as a crashed tritonserver would.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TRICKLE_S = 0.5


@dataclass
class Seen:
    posts: int = 0
    conns: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _read_head(f: Any) -> tuple[str, dict[str, str]] | None:
    line = f.readline()
    if not line:
        return None
    headers: dict[str, str] = {}
    while (h := f.readline()) not in (b"\r\n", b"\n", b""):
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return line.decode("latin-1"), headers


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'data: {"choices": [{"text": " w0"}]}\n\n'


def _serve_conn(conn: socket.socket, mode: str, seen: Seen, stop: threading.Event) -> None:
    f = conn.makefile("rb")
    with contextlib.suppress(OSError, ValueError):
        while not stop.is_set():
            head = _read_head(f)
            if head is None:
                return
            line, headers = head
            f.read(int(headers.get("content-length", "0") or 0))
            if line.startswith("GET"):
                body = b'{"data": [{"id": "m"}]}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
            with seen.lock:
                seen.posts += 1
            if mode == "silent":
                stop.wait()
                return
            if mode == "wrong-shape":
                events = [b'data: {"choices": 7}\n\n', b"data: [DONE]\n\n"]
                conn.sendall(SSE_HEAD + b"".join(_chunk(e) for e in events) + _chunk(b""))
                continue
            conn.sendall(SSE_HEAD)
            if mode == "headers":
                stop.wait()
                return
            if mode == "trickle":
                conn.sendall(_chunk(b":"))
                while not stop.wait(TRICKLE_S):
                    conn.sendall(_chunk(b"."))  # one more byte of an SSE comment line: never a whole event
                return
            conn.sendall(_chunk(EVENT))
            if mode == "close-mid-body":
                conn.shutdown(socket.SHUT_RDWR)
                return
            stop.wait()  # mid-body: stall
            return


@contextmanager
def stall_http(mode: str) -> Iterator[tuple[str, Seen]]:
    """``http://127.0.0.1:PORT`` of an OpenAI endpoint that misbehaves as ``mode`` says (module docstring)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    stop = threading.Event()
    seen = Seen()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with seen.lock:
                seen.conns.append(conn)
            threading.Thread(target=_serve_conn, args=(conn, mode, seen, stop), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", seen
    finally:
        stop.set()
        t.join(5)
        with seen.lock:
            for c in seen.conns:
                with contextlib.suppress(OSError):
                    c.close()
        srv.close()


@dataclass
class Triton:
    url: str
    stop: Any
    streams: int = 0


def _bytes_tensor(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<I", len(raw)) + raw


@contextmanager
def stall_triton(mode: str) -> Iterator[Triton]:
    """A Triton-protocol gRPC server on 127.0.0.1 whose streams behave as ``mode`` says (module docstring)."""
    import grpc
    from tritonclient.grpc import model_config_pb2 as mc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as rpc

    halt = threading.Event()
    info = Triton("", None)

    def response(text: str, final: bool) -> Any:
        out = pb.ModelInferResponse(model_name="m", id="0")
        if not final:  # as Triton's empty final response: no outputs, only the flag
            t = out.outputs.add()
            t.name, t.datatype = "text_output", "BYTES"
            t.shape.extend([1, 1])
            out.raw_output_contents.append(_bytes_tensor(text))
        out.parameters["triton_final_response"].bool_param = final
        return pb.ModelStreamInferResponse(infer_response=out)

    class Servicer(rpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
        def ServerLive(self, request: Any, context: Any) -> Any:
            return pb.ServerLiveResponse(live=True)

        def ModelConfig(self, request: Any, context: Any) -> Any:
            if mode == "config-silent":
                while context.is_active() and not halt.wait(0.1):
                    pass
            cfg = mc.ModelConfig(name="m", backend="python")
            for name, dt in (("text_input", mc.TYPE_STRING), ("max_tokens", mc.TYPE_INT32), ("stream", mc.TYPE_BOOL)):
                cfg.input.add(name=name, data_type=dt, dims=[1])
            cfg.output.add(name="text_output", data_type=mc.TYPE_STRING, dims=[-1])
            cfg.model_transaction_policy.decoupled = True
            return pb.ModelConfigResponse(config=cfg)

        def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Iterator[Any]:
            for _ in request_iterator:
                info.streams += 1
                if mode == "silent":
                    while context.is_active() and not halt.wait(0.1):
                        pass
                    return
                if mode == "trickle":
                    while context.is_active() and not halt.wait(TRICKLE_S):
                        yield response(".", False)
                    return
                for i in range(3):
                    time.sleep(0.1)
                    yield response(f" w{i}", False)
                yield response("", True)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    rpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def stop() -> None:
        halt.set()
        server.stop(grace=0)

    info.url, info.stop = f"127.0.0.1:{port}", stop
    try:
        yield info
    finally:
        stop()
        server.wait_for_termination(5)
