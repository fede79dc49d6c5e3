"""A stand-in server for the capacity example: the OpenAI streaming API with a fixed number of decode slots
and a fixed time per token, and no model behind it (`toolchain bench stand-in`).

What it models is the one thing a knee search measures: a request holds one of ``slots`` decode slots for
``first_token_ms`` + (max_tokens − 1) × ``token_ms``; a request that finds every slot busy waits, before its
first token, until one frees (the queue a real server's scheduler forms when its batch is full). So the
highest concurrency whose P99 TTFT stays between the unloaded and the queued TTFT is exactly ``slots``.

It is not an LLM and says so everywhere: the start-up line, ``/v1/models`` (``owned_by``), every response
(``model`` names the stand-in, header ``X-Toolchain-Stand-In``), and the result of a bench run against it
(``provenance.reference``, which `toolchain plan --measured` refuses to size a fleet from). Its text is
words of its own tokenizer, which it writes for ``toolchain bench --tokenizer DIR`` (``write_tokenizer``):
one token per word, so it counts prompt tokens by splitting on spaces.

Endpoints: ``GET /v1/models``, ``GET /health``, ``POST /v1/completions`` and ``POST
/v1/chat/completions`` (``stream`` true or false; ``stream_options.include_usage`` adds the usage event).
It binds 127.0.0.1 unless told otherwise; the caller owns signals and sets ``stop`` (a library installs none).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from toolchain._deps import require
from toolchain.errors import UserInputError

SERVED_MODEL = "stand-in"
HEADER = "X-Toolchain-Stand-In"
STATUS_EVERY_S = 5.0  # a progress line at most this often, when something changed
# 20 syllables → 400 two-syllable words: the stand-in's vocabulary (its text and its tokenizer)
_SYLLABLES = ("ba", "ko", "mi", "tu", "re", "sa", "no", "li", "pe", "da", "vo", "ki", "mu", "te", "ra", "go", "zi",
              "lo", "fe", "nu")  # fmt: skip
WORDS = tuple(a + b for a in _SYLLABLES for b in _SYLLABLES)
SPECIAL = ("<unk>", "<s>", "</s>")


def describe(slots: int) -> str:
    """What the stand-in is, in the words every output uses."""
    return f"toolchain stand-in server ({slots} decode slots, no model: not an LLM)"


@dataclass(frozen=True)
class StandInOptions:
    slots: int = 4
    first_token_ms: float = 20.0
    token_ms: float = 50.0
    host: str = "127.0.0.1"
    port: int = 8000

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise UserInputError(f"--slots must be at least 1, not {self.slots}", "e.g. --slots 3")
        for flag, v in (("--first-token-ms", self.first_token_ms), ("--token-ms", self.token_ms)):
            if not 0 <= v <= 60_000:  # also NaN
                raise UserInputError(f"{flag} must be from 0 to 60000 ms, not {v}")
        if not 0 <= self.port <= 65535:
            raise UserInputError(f"--port must be from 0 to 65535, not {self.port}", "0 picks a free port")


@dataclass
class Counters:
    served: int = 0  # requests answered to the end
    busy: int = 0  # requests holding a slot
    waiting: int = 0  # requests waiting for a slot
    busy_max: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, slots: int) -> str:
        served = f"{self.served} request{'' if self.served == 1 else 's'} served"
        return f"{served}, {self.busy}/{slots} slots busy, {self.waiting} waiting"


def write_tokenizer(out: Path) -> Path:
    """Write the stand-in's word-level tokenizer (one token per word of its vocabulary) to ``out``, in the form
    Transformers' ``AutoTokenizer.from_pretrained`` reads; returns ``out``."""
    tokenizers = require("tokenizers", "quantize")
    vocab = {w: i for i, w in enumerate((*SPECIAL, *WORDS))}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
        "comment": "the tokenizer of the toolchain stand-in server (toolchain/bench/standin.py); not a model's",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def _handler(opts: StandInOptions, counters: Counters) -> type[BaseHTTPRequestHandler]:
    gate = threading.BoundedSemaphore(opts.slots)
    name = describe(opts.slots)
    first_s, token_s = opts.first_token_ms / 1000, opts.token_ms / 1000

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "toolchain-stand-in"

        def log_message(self, *a: Any) -> None:  # the progress line says what happened
            pass

        def setup(self) -> None:
            super().setup()
            # small SSE writes must not wait for delayed ACKs (uvicorn and Triton set it too)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _json(self, code: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header(HEADER, name)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code: int, message: str) -> None:
            self._json(code, {"error": {"message": message, "type": "invalid_request_error", "code": code}})

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": SERVED_MODEL, "object": "model", "owned_by": name}]})
            elif self.path == "/health":
                self._json(200, {"status": "ok", "server": name})
            else:
                self._error(404, f"no route {self.path}; this {name} serves /v1/models and /v1/completions")

        def do_POST(self) -> None:
            chat = self.path == "/v1/chat/completions"
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._error(404, f"no route {self.path}; this {name} serves /v1/completions")
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(req, dict):
                    raise ValueError
                n = int(req.get("max_tokens") or 16)
                if n < 1:
                    raise ValueError
            except (ValueError, TypeError, AttributeError):
                self._error(400, "the body must be a JSON object with a positive max_tokens")
                return
            if req.get("model") != SERVED_MODEL:
                model = req.get("model")
                served = f"the stand-in serves {SERVED_MODEL!r}: --model {SERVED_MODEL}"
                self._error(404, f"model {model!r} not served; {served}")
                return
            messages = req.get("messages") or []
            if chat and (not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages)):
                self._error(400, "messages must be a list of objects with a content")
                return
            prompt = req.get("prompt") if not chat else " ".join(str(m.get("content", "")) for m in messages)
            prompt_tokens = len(str(prompt or "").split())
            try:
                self._generate(n, prompt_tokens, chat, bool(req.get("stream")), req.get("stream_options") or {})
            except (BrokenPipeError, ConnectionResetError):
                return  # the client went away mid-answer (Ctrl-C, a deadline): nothing to tell it

        def _event(self, obj: Any) -> None:
            data = f"data: {json.dumps(obj)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _choice(self, text: str, chat: bool, finish: str | None) -> dict[str, Any]:
            if chat:
                return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            return {"index": 0, "text": text, "finish_reason": finish}

        def _generate(self, n: int, prompt_tokens: int, chat: bool, stream: bool, options: dict[str, Any]) -> None:
            kind = "chat.completion" if chat else "text_completion"
            head = {"id": f"standin-{time.monotonic_ns()}", "object": kind + (".chunk" if chat else ""), "model": name}
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header(HEADER, name)
                self.end_headers()
            words: list[str] = []
            with counters.lock:
                counters.waiting += 1
            gate.acquire()  # every slot busy: wait here, before the first token
            try:
                with counters.lock:
                    counters.waiting -= 1
                    counters.busy += 1
                    counters.busy_max = max(counters.busy_max, counters.busy)
                t0 = time.perf_counter()
                for i in range(n):
                    due = t0 + first_s + i * token_s  # absolute times: no drift over a long answer
                    time.sleep(max(0.0, due - time.perf_counter()))
                    word = " " + WORDS[i % len(WORDS)]
                    words.append(word)
                    if stream:
                        finish = "length" if i == n - 1 else None
                        self._event({**head, "choices": [self._choice(word, chat, finish)]})
            finally:
                with counters.lock:
                    counters.busy -= 1
                gate.release()
            if stream and options.get("include_usage"):
                self._event({**head, "choices": [], "usage": usage})
            # counted before the answer's last bytes go out: a client holding its whole answer finds it counted
            # (counted after them, a Ctrl-C right after an answer closed on "0 requests served")
            with counters.lock:
                counters.served += 1
            try:
                if stream:
                    data = b"data: [DONE]\n\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
                    self.wfile.flush()
                else:
                    text = "".join(words)
                    choice = (
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                        if chat
                        else {"index": 0, "text": text, "finish_reason": "length"}
                    )
                    self._json(200, {**head, "object": kind, "choices": [choice], "usage": usage})
            except OSError:  # the client left before the end: not answered to the end after all
                with counters.lock:
                    counters.served -= 1
                raise

    return Handler


class StandIn:
    """The server, started on construction (``url``), stopped by ``close``; a context manager."""

    def __init__(self, opts: StandInOptions) -> None:
        self.opts = opts
        self.counters = Counters()
        try:
            self.httpd = ThreadingHTTPServer((opts.host, opts.port), _handler(opts, self.counters))
        except OSError as e:
            raise UserInputError(
                f"the stand-in cannot listen on {opts.host}:{opts.port}: {e.strerror or e}",
                "pass another --port (0 picks a free one)",
            ) from e
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="stand-in", daemon=True)
        self.thread.start()
        host, port = self.httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    opts: StandInOptions,
    *,
    stop: threading.Event,
    say: Callable[[str], None],
    tokenizer_out: Path | None = None,
    status_every_s: float = STATUS_EVERY_S,
) -> int:
    """Serve until ``stop`` is set (or Ctrl-C): a start-up line, then a progress line at most every
    ``status_every_s`` while requests come in, then a closing line. Returns the number of requests served."""
    if tokenizer_out is not None:
        write_tokenizer(tokenizer_out)
    with StandIn(opts) as srv:
        tok = f"; tokenizer for `toolchain bench --tokenizer`: {tokenizer_out}" if tokenizer_out else ""
        say(
            f"ready: {describe(opts.slots)} at {srv.url} (model {SERVED_MODEL!r}, first token {opts.first_token_ms:g} "
            f"ms, then {opts.token_ms:g} ms per token){tok}; Ctrl-C stops it"
        )
        last = Counters().line(opts.slots)  # idle: nothing to say until requests come in
        try:
            while not stop.wait(status_every_s):
                with srv.counters.lock:
                    line = srv.counters.line(opts.slots)
                if line != last:
                    say(f"stand-in: {line}")
                    last = line
        except KeyboardInterrupt:
            stop.set()
        with srv.counters.lock:
            served = srv.counters.served
    say(f"stand-in stopped: {served} request{'' if served == 1 else 's'} served")
    return served
