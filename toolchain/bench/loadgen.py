"""Asyncio load generator: Triton gRPC bidirectional streaming (tritonclient.grpc.aio) and
OpenAI-compatible HTTP SSE; fixed concurrency or constant/Poisson rate; warm-up excluded; bounded
by count or duration; Ctrl-C or a dead server keeps what was measured.

Every request has two deadlines (docs/metrics.md, "Deadlines"): ``timeout`` bounds the whole request, from
the connection to the last byte (``--timeout``), and ``idle_timeout`` bounds each wait for the server to
send anything at all: the connection, the first byte, the gap between chunks (``--idle-timeout``). A server
that trickles a byte every few seconds passes the idle deadline forever; the total one still ends the
request, which is recorded with error kind ``timeout``.

Error kinds (``RequestRecord.error_kind``), each with a one-line reason: ``server`` (it answered with an
error), ``connection`` (it went away or could not be reached), ``protocol`` (an answer in a shape the
client cannot use), ``timeout`` (a deadline passed), ``cancelled`` (in flight at Ctrl-C)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.artifacts.bench_result import Load
from toolchain.bench import speculative
from toolchain.bench.metrics import RequestRecord
from toolchain.bench.options import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TIMEOUT_S  # declared with the flags
from toolchain.bench.workload import Request, send_offsets
from toolchain.errors import BenchError, BenchUnavailableError
from toolchain.progress import Progress, silent

PERF_OUT = ("text_output", "num_output_tokens", "kv_cache_reused_blocks", *speculative.OUTPUTS)
LLMAPI_MAX_TOKENS = "sampling_param_max_tokens"  # TensorRT-LLM's llmapi model names its inputs after SamplingParams


@dataclass
class Shard:
    """One worker process's part of a load point: global request indices, send offsets, the common start."""

    indices: list[int]
    offsets: list[float] | None = None  # open loop; None: closed loop at the load's concurrency
    t0: float | None = None  # perf_counter of the common start (set once every worker is ready)
    ready: Callable[[], Awaitable[None]] = field(default=lambda: _no_wait())


async def _no_wait() -> None:
    return None


@dataclass
class RunOutcome:
    records: list[RequestRecord]
    wall_s: float
    interrupted: str | None = None
    # why the load point ended early: "interrupted" (Ctrl-C), "server-gone", "stop-on-error"; None = ran to the end
    stop: str | None = None
    client_cpu_s: float = 0.0
    lag_s: list[float] = field(default_factory=list)  # rate mode: actual send time - due time
    loop_lag_s: list[float] = field(default_factory=list)  # event-loop lag sampled during the run
    workers: list[dict[str, Any]] = field(default_factory=list)  # --workers N: each process's share

    def halt(self, kind: str, why: str) -> None:
        if self.stop is None:
            self.stop, self.interrupted = kind, why


INTERRUPTED = "interrupted (Ctrl-C); results so far were kept, requests in flight are marked cancelled"


def one_line(text: str, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters, cut at a word boundary (never mid-word)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1].rsplit(" ", 1)[0] if " " in flat[: limit - 1] else flat[: limit - 1]
    return cut.rstrip(" ,;:") + "…"


# gRPC status codes that mean the server (or the path to it) went away, not that it refused this request
GRPC_GONE = {"UNAVAILABLE", "CANCELLED", "UNKNOWN", "ABORTED", "INTERNAL"}


def classify(e: BaseException) -> tuple[str, str]:
    """(error kind, one-line reason) of an exception raised while a request was in flight."""
    code = getattr(e, "code", None)
    if callable(code) and hasattr(e, "details"):  # grpc.aio.AioRpcError, grpc.RpcError
        name = str(getattr(code(), "name", code()))
        details = one_line(str(e.details() or ""), 160)
        if name == "DEADLINE_EXCEEDED":
            return "timeout", f"gRPC DEADLINE_EXCEEDED: {details or 'the request deadline passed'}"
        if name in GRPC_GONE and (name == "UNAVAILABLE" or _gone_text(details)):
            return "connection", f"the server went away (gRPC {name}: {details or 'no details'})"
        return "server", f"gRPC {name}: {details or 'no details'}"
    if isinstance(e, (TypeError, ValueError, KeyError, IndexError, AttributeError, UnicodeError)):
        return "protocol", one_line(f"an answer the client could not read ({type(e).__name__}: {e})")
    if isinstance(e, (ConnectionError, EOFError)):
        return "connection", one_line(f"the connection failed ({type(e).__name__}: {e})")
    if isinstance(e, TimeoutError):
        return "timeout", one_line(f"timed out ({e})" if str(e) else "timed out")
    return "server", one_line(f"{type(e).__name__}: {e}")


def _gone_text(text: str) -> bool:
    t = text.lower()
    return any(g in t for g in GONE)


def _unreachable(e: BaseException) -> type[BenchError]:
    """The error for a server the readiness check could not reach: transient (exit 75) when the connection was
    refused, timed out or reset (gRPC UNAVAILABLE, DEADLINE_EXCEEDED), a BenchError otherwise (a malformed URL)."""
    from toolchain import http

    grpc_down = any(s in str(e) for s in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "Connection refused"))
    gone = http.transient(e) or grpc_down or isinstance(e, asyncio.TimeoutError)
    return BenchUnavailableError if gone else BenchError


async def within(coro: Awaitable[None], rec: RequestRecord, total: float) -> None:
    """Run one request under its total deadline; past it the request is a ``timeout`` error (the stream is closed).
    When it ends, either way, is ``rec.ended``: an abandoned request's e2e is the time it ran."""
    try:
        await asyncio.wait_for(coro, total)
    except asyncio.TimeoutError:
        if rec.error is None:
            got = f" after {len(rec.chunk_times)} chunk(s)" if rec.chunk_times else ""
            rec.error = f"no complete answer within the request deadline of {total:g} s{got} (--timeout)"
        rec.error_kind = "timeout"
    finally:
        rec.ended = time.perf_counter()


class TritonTarget:
    def __init__(self, url: str, model: str, stream: bool, timeout: float, idle_timeout: float | None = None) -> None:
        import tritonclient.grpc.aio as grpcaio

        self.g = grpcaio
        self.url, self.model, self.stream, self.timeout = url, model, stream, timeout
        self.idle_timeout = min(timeout, idle_timeout or DEFAULT_IDLE_TIMEOUT_S)
        self.client = grpcaio.InferenceServerClient(url)
        self.inputs: set[str] = set()
        self.outputs: list[str] = list(PERF_OUT)
        self.on_text: Callable[[str], None] | None = None  # each streamed piece of text (toolchain infer)
        self.stand_in: str | None = None  # what serves the model when it is not TensorRT-LLM (set by check)
        self.names = {"max_tokens": "max_tokens", "stream": "stream"}  # the ensemble's and BLS's input names
        self.batched = True

    async def check(self) -> None:
        try:
            live = await asyncio.wait_for(self.client.is_server_live(), 5)
        except Exception as e:
            raise _unreachable(e)(
                f"cannot reach Triton at {self.url} ({type(e).__name__})",
                "start it with `toolchain serve DIR` or fix --url (host:grpc_port)",
            ) from e
        if not live:
            raise BenchError(f"Triton at {self.url} is not live")
        try:
            cfg = (await self._model_config(self.model))["config"]
        except Exception as e:
            if isinstance(e, TimeoutError) or "DEADLINE_EXCEEDED" in str(e):
                raise BenchError(
                    f"Triton at {self.url} sent no config for model {self.model!r} within {self.idle_timeout:g} s "
                    "(--idle-timeout)",
                    "check the server's health (its log, `toolchain diagnose`), or raise --idle-timeout",
                ) from e
            raise BenchError(
                f"model {self.model!r} is not available at {self.url}: {one_line(str(e))}",
                "check --model (ensemble, tensorrt_llm_bls, ...)",
            ) from e
        self.inputs = {i["name"] for i in cfg.get("input", [])}
        self.outputs = [o for o in PERF_OUT if o in {x["name"] for x in cfg.get("output", [])}]
        if "max_tokens" not in self.inputs and LLMAPI_MAX_TOKENS in self.inputs:  # TensorRT-LLM's llmapi model
            self.names = {"max_tokens": LLMAPI_MAX_TOKENS, "stream": "streaming"}
        self.batched = int(cfg.get("max_batch_size", 0) or 0) > 0  # inputs carry a batch dimension
        missing = {"text_input", self.names["max_tokens"]} - self.inputs
        if missing or "text_output" not in self.outputs:
            raise BenchError(
                f"model {self.model!r} does not take text_input/max_tokens and return text_output",
                "benchmark the ensemble, tensorrt_llm_bls or llmapi (tensorrt_llm) model",
            )
        if self.stream and self.names["stream"] not in self.inputs:
            raise BenchError(f"model {self.model!r} has no 'stream' input", "pass --no-stream or pick another model")
        steps = [cfg]
        if cfg.get("platform") == "ensemble":
            for step in cfg.get("ensemble_scheduling", {}).get("step", []):
                steps.append((await self._model_config(step["model_name"]))["config"])
        for c in steps:  # the CPU stand-in's tensorrt_llm model says what it is (triton.emit's REFERENCE_NOTE)
            note = c.get("parameters", {}).get("toolchain_reference", {}).get("string_value")
            self.stand_in = self.stand_in or note
        if self.stream:
            decoupled = any(bool(c.get("model_transaction_policy", {}).get("decoupled")) for c in steps)
            if not decoupled:
                raise BenchError(
                    f"model {self.model!r} is not decoupled, so it cannot stream tokens",
                    "serve it with decoupled mode (serving.decoupled: true) or pass --no-stream",
                )

    async def _model_config(self, name: str) -> Any:
        """A model's config as JSON, within the idle deadline (gRPC's own deadline, and ours around it)."""
        call = self.client.get_model_config(name, as_json=True, client_timeout=self.idle_timeout)
        try:
            return await asyncio.wait_for(call, self.idle_timeout + 1)
        except asyncio.TimeoutError as e:
            raise TimeoutError(f"no answer within {self.idle_timeout:g} s (--idle-timeout)") from e

    def _inputs(self, req: Request) -> list[Any]:
        def inp(name: str, arr: Any, dt: str) -> Any:
            arr = arr if self.batched else arr.reshape(-1)
            i = self.g.InferInput(name, list(arr.shape), dt)
            i.set_data_from_numpy(arr)
            return i

        out = [
            inp("text_input", np.array([[req.prompt]], dtype=object), "BYTES"),
            inp(self.names["max_tokens"], np.array([[req.max_tokens]], dtype=np.int32), "INT32"),
        ]
        flags = ((self.names["stream"], self.stream), ("return_perf_metrics", True), ("return_num_output_tokens", True))
        for name, value in flags:
            if name in self.inputs:
                out.append(inp(name, np.array([[value]], dtype=bool), "BOOL"))
        if req.num_draft_tokens:
            out.append(inp("num_draft_tokens", np.array([[req.num_draft_tokens]], dtype=np.int32), "INT32"))
        return out

    async def one(self, req: Request, rec: RequestRecord) -> None:
        """One request under both deadlines; a gRPC failure becomes one classified line."""
        try:
            await within(self._one(req, rec), rec, self.timeout)
        except Exception as e:
            if not hasattr(e, "details"):
                raise
            rec.error_kind, rec.error = classify(e)

    async def _one(self, req: Request, rec: RequestRecord) -> None:
        outputs = [self.g.InferRequestedOutput(n) for n in self.outputs]
        inputs = self._inputs(req)

        async def gen() -> Any:
            yield {
                "model_name": self.model,
                "inputs": inputs,
                "outputs": outputs,
                "request_id": str(rec.index),
                "enable_empty_final_response": True,
            }

        rec.sent = time.perf_counter()
        server_tokens = None
        utf8 = codecs.getincrementaldecoder("utf-8")("replace")  # a character split over pieces waits for its rest
        # stream_timeout is gRPC's deadline for the whole call (the server sees it too; a second later than
        # `within`, so the client's own deadline is the one reported); the idle
        # deadline bounds each wait for the next response.
        responses = self.client.stream_infer(gen(), stream_timeout=self.timeout + 1)
        while True:
            try:
                result, error = await asyncio.wait_for(responses.__anext__(), self.idle_timeout)
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                responses.cancel()
                rec.error, rec.error_kind = self._silent(rec), "timeout"
                break
            now = time.perf_counter()
            if error is not None:
                rec.error = one_line(str(error))
                status = str(getattr(error, "status", lambda: "")() or "")
                # an in-band error: the server (or its model, unloading as it shuts down) may be going away
                gone = "UNAVAILABLE" in status or _gone_text(rec.error)
                rec.error_kind = "timeout" if "DEADLINE" in status else "connection" if gone else "server"
                break
            text = result.as_numpy("text_output")
            if text is not None and text.size:
                rec.chunk_times.append(now)
                if self.on_text is not None:
                    piece = text.reshape(-1)[0]
                    self.on_text(utf8.decode(piece) if isinstance(piece, bytes) else str(piece))
            n = result.as_numpy("num_output_tokens")
            if n is not None and n.size:
                server_tokens = max(server_tokens or 0, int(n.reshape(-1)[0]))
            reused = result.as_numpy("kv_cache_reused_blocks")
            if reused is not None and reused.size:
                rec.perf["kv_cache_reused_blocks"] = int(reused.reshape(-1)[0])
            speculative.read_outputs(result, rec.perf)
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        if self.on_text is not None and (rest := utf8.decode(b"", final=True)):
            self.on_text(rest)
        if server_tokens is not None:
            rec.output_tokens = server_tokens
        else:
            rec.token_source = "chunks (server sent no token count)"
        if rec.error is None and not rec.chunk_times:
            rec.error, rec.error_kind = "the responses held no text_output", "protocol"

    def _silent(self, rec: RequestRecord) -> str:
        what = "the first response" if not rec.chunk_times else "the next response"
        return f"the server sent nothing for {self.idle_timeout:g} s while waiting for {what} (--idle-timeout)"

    async def close(self) -> None:
        await self.client.close()


class OpenAITarget:
    """/v1/completions or /v1/chat/completions with stream=true; tokens from `usage` when sent."""

    def __init__(self, url: str, model: str, chat: bool, timeout: float, idle_timeout: float | None = None) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.model, self.chat = model, chat
        self.timeout = timeout
        self.idle_timeout = min(timeout, idle_timeout or DEFAULT_IDLE_TIMEOUT_S)
        self.httpx = httpx
        self.on_text: Callable[[str], None] | None = None
        self.stand_in: str | None = None
        # No cap on pooled connections: each in-flight request keeps its own and gives it back at the end
        # of the response, so the next request reuses it instead of paying a TCP handshake.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=60)
        # httpx's timeouts are per operation (connect, each read, each write): the idle deadline. The total
        # deadline is `within` around the whole request.
        self.http = httpx.AsyncClient(timeout=self.idle_timeout, limits=limits)

    async def check(self) -> None:
        try:
            r = await self.http.get(f"{self.url}/v1/models", timeout=5)
        except Exception as e:
            raise _unreachable(e)(
                f"cannot reach {self.url} ({type(e).__name__})", "fix --url or start the server"
            ) from e
        if r.status_code >= 500:  # the one status mapping (toolchain/http.py); the request path keeps its own client
            from toolchain import http
            from toolchain.bench.prom import BENCH_ERRORS

            service = http.Service(f"the server at {self.url}", kinds=BENCH_ERRORS, policy=http.ONCE)
            raise http.status_error(r, "GET /v1/models", service)

    async def one(self, req: Request, rec: RequestRecord) -> None:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.chat:
            body["messages"] = [{"role": "user", "content": req.prompt}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = req.prompt
            path = "/v1/completions"
        try:
            await within(self._stream(path, body, rec), rec, self.timeout)
        except self.httpx.TimeoutException as e:
            what = "a connection" if isinstance(e, self.httpx.ConnectTimeout) else "the first token"
            if rec.chunk_times:
                what = "the next chunk"
            rec.error = f"the server sent nothing for {self.idle_timeout:g} s while waiting for {what} (--idle-timeout)"
            rec.error_kind = "timeout"
        except (self.httpx.ConnectError, self.httpx.RemoteProtocolError, self.httpx.ReadError) as e:
            rec.error, rec.error_kind = one_line(f"{type(e).__name__}: {e}"), "connection"
        if rec.error is None and not rec.chunk_times:
            rec.error, rec.error_kind = "the stream held no completion text", "protocol"

    async def _stream(self, path: str, body: dict[str, Any], rec: RequestRecord) -> None:
        rec.sent = time.perf_counter()
        async with self.http.stream("POST", self.url + path, json=body) as r:
            if r.status_code != 200:
                # The server answered: an overloaded (503) or failing server is not an unreachable one.
                rec.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                rec.error_kind = "server"
                return
            done = False
            async for line in r.aiter_lines():
                # Read to the end of the response even after [DONE]: leaving early closes the connection,
                # and the next request would pay a new TCP handshake inside its TTFT.
                if done or not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                now = time.perf_counter()
                try:
                    obj = json.loads(data)
                except json.JSONDecodeError:
                    rec.error, rec.error_kind = f"not JSON in the event stream: {data[:80]!r}", "protocol"
                    done = True
                    continue
                wrong = _wrong_shape(obj, self.chat)
                if wrong:
                    rec.error, rec.error_kind = f"an event of the wrong shape ({wrong}): {data[:80]!r}", "protocol"
                    done = True
                    continue
                for ch in obj.get("choices") or []:
                    piece = ch.get("text") if not self.chat else (ch.get("delta") or {}).get("content")
                    if piece:
                        rec.chunk_times.append(now)
                        if self.on_text is not None:
                            self.on_text(piece)
                        break
                usage = obj.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    rec.output_tokens = int(usage["completion_tokens"])
        if rec.output_tokens is None:
            rec.token_source = "chunks (server sent no usage)"

    async def close(self) -> None:
        await self.http.aclose()


def _wrong_shape(obj: Any, chat: bool) -> str | None:
    """What is wrong with one decoded OpenAI stream event, in words; None when the client can read it."""
    if not isinstance(obj, dict):
        return f"a JSON {_json_type(obj)}, not an object"
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        return f"'choices' is a JSON {_json_type(choices)}, not a list"
    for ch in choices or []:
        if not isinstance(ch, dict):
            return f"a choice is a JSON {_json_type(ch)}, not an object"
        inner = ch.get("delta") if chat else ch
        if chat and inner is not None and not isinstance(inner, dict):
            return f"'delta' is a JSON {_json_type(inner)}, not an object"
        piece = (inner or {}).get("content" if chat else "text")
        if piece is not None and not isinstance(piece, str):
            return f"the completion text is a JSON {_json_type(piece)}, not a string"
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return f"'usage' is a JSON {_json_type(usage)}, not an object"
    n = (usage or {}).get("completion_tokens")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        return f"'usage.completion_tokens' is a JSON {_json_type(n)}, not an integer"
    return None


def _json_type(v: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "list", dict: "object"}
    return "null" if v is None else names.get(type(v), type(v).__name__)


GONE = (
    "unavailable",
    "connect",
    "no available versions",
    "socket closed",
    "stream removed",
    "shutting down",
    "connection reset",
    "broken pipe",
)


def _server_gone(rec: RequestRecord) -> bool:
    """Errors that mean the server (or the model) went away, as opposed to a request it answered with an error."""
    if rec.error_kind is not None:
        return rec.error_kind == "connection"
    e = (rec.error or "").lower()
    return any(g in e for g in GONE)


LOOP_TICK_S = 0.01


async def _watch_loop(lags: list[float], stop: asyncio.Event) -> None:
    """Sample event-loop lag: how late a 10 ms sleep wakes up. A busy client delays every timestamp it takes."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(LOOP_TICK_S)
        lags.append(max(0.0, time.perf_counter() - t - LOOP_TICK_S))


async def _run(
    target: Any,
    reqs: list[Request],
    load: Load,
    warmup: int,
    seed: int,
    stop_on_error: bool,
    max_conn_errors: int,
    holder: dict[str, RunOutcome],
    progress: Progress = silent,
    shard: Shard | None = None,
) -> RunOutcome:
    """One load point: the warm-up, then the measured requests at the load's concurrency or rate.

    ``shard`` is one worker process's part of a multi-process load (toolchain.bench.workers): its requests'
    global indices, their send offsets and the common start time, all on the one perf_counter clock.
    """
    records: list[RequestRecord] = []
    outcome = RunOutcome(records, 0.0)
    holder["outcome"] = outcome
    await _warm_up(target, reqs[:warmup], records)
    todo = reqs[warmup:]
    if shard is not None:
        await shard.ready()
    cpu0 = time.process_time()
    t0 = shard.t0 if shard is not None and shard.t0 is not None else time.perf_counter()
    deadline = t0 + load.duration_s if load.duration_s else None
    stop = asyncio.Event()
    consecutive = {"conn": 0, "done": 0, "failed": 0}
    stage = f"{load.label()} requests"

    async def fire(i: int, r: Request, due: float | None = None) -> None:
        index = shard.indices[i] if shard is not None else warmup + i
        rec = RequestRecord(index, r.prompt_tokens, r.max_tokens, time.perf_counter(), shared_prefix=r.shared_prefix)
        rec.scheduled = due
        records.append(rec)
        try:
            await target.one(r, rec)
        except asyncio.CancelledError:
            if rec.error is None:
                rec.error, rec.error_kind = "cancelled", "cancelled"
            raise
        except Exception as e:
            if rec.error is None:
                rec.error_kind, rec.error = classify(e)
        finally:
            if rec.ended is None:  # failed before its deadline's clock (within) ran
                rec.ended = time.perf_counter()
        _tally(rec, consecutive, outcome, stop, stop_on_error, max_conn_errors)
        failed = consecutive["failed"]
        progress(stage, consecutive["done"], len(todo), unit="req", message=f"{failed} failed" if failed else None)

    tasks: list[asyncio.Task[None]] = []
    watch_stop = asyncio.Event()
    watcher = asyncio.create_task(_watch_loop(outcome.loop_lag_s, watch_stop))
    try:
        if load.concurrency is not None:
            tasks = _closed_loop(load.concurrency, todo, fire, stop, deadline)
        else:
            offsets = (
                shard.offsets if shard is not None and shard.offsets is not None else send_offsets(load, todo, seed)
            )
            await _open_loop(tasks, todo, offsets, t0, fire, stop, deadline)
        await asyncio.gather(*tasks)
    except (asyncio.CancelledError, KeyboardInterrupt):
        outcome.halt("interrupted", INTERRUPTED)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        outcome.wall_s = time.perf_counter() - t0
        outcome.client_cpu_s = time.process_time() - cpu0
        watch_stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        # Send lag is taken when the request actually went out (rec.sent), not when its task was created.
        outcome.lag_s = [max(0.0, r.sent - r.scheduled) for r in records if r.scheduled is not None and not r.warmup]
    return outcome


async def _warm_up(target: Any, reqs: list[Request], records: list[RequestRecord]) -> None:
    """Send the warm-up requests one after another; their failures are recorded, never raised."""
    for i, r in enumerate(reqs):
        rec = RequestRecord(i, r.prompt_tokens, r.max_tokens, 0.0, warmup=True, shared_prefix=r.shared_prefix)
        with contextlib.suppress(Exception):
            await target.one(r, rec)
        records.append(rec)


def _tally(
    rec: RequestRecord,
    consecutive: dict[str, int],
    outcome: RunOutcome,
    stop: asyncio.Event,
    stop_on_error: bool,
    max_conn_errors: int,
) -> None:
    """Count a finished request; halt the run after too many connection errors in a row, or on any error if asked."""
    if rec.error:
        if _server_gone(rec):
            rec.error_kind = "connection"
            consecutive["conn"] += 1
            if consecutive["conn"] >= max_conn_errors:
                outcome.halt("server-gone", f"server unreachable during the run: {one_line(rec.error)}")
                stop.set()
        if stop_on_error:
            outcome.halt("stop-on-error", f"stopped on error ({rec.error_kind or 'server'}): {one_line(rec.error)}")
            stop.set()
    else:
        consecutive["conn"] = 0
    consecutive["done"] += 1
    consecutive["failed"] += 0 if rec.ok else 1


def _closed_loop(
    concurrency: int,
    todo: list[Request],
    fire: Callable[[int, Request], Awaitable[None]],
    stop: asyncio.Event,
    deadline: float | None,
) -> list[asyncio.Task[None]]:
    """``concurrency`` workers that take the next request as soon as their previous one finished."""
    it = iter(enumerate(todo))

    async def worker() -> None:
        for i, r in it:
            if stop.is_set() or (deadline and time.perf_counter() > deadline):
                return
            await fire(i, r)

    return [asyncio.create_task(worker()) for _ in range(concurrency)]


async def _open_loop(
    tasks: list[asyncio.Task[None]],
    todo: list[Request],
    offsets: list[float],
    t0: float,
    fire: Callable[[int, Request, float], Coroutine[Any, Any, None]],
    stop: asyncio.Event,
    deadline: float | None,
) -> None:
    """Start each request at its arrival time (rate or trace offsets), appending its task to ``tasks``."""
    for (i, r), off in zip(enumerate(todo), offsets, strict=False):
        wait = t0 + off - time.perf_counter()
        if wait > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
        if stop.is_set() or (deadline and time.perf_counter() > deadline):
            break
        tasks.append(asyncio.create_task(fire(i, r, t0 + off)))


def make_target(
    protocol: str,
    url: str,
    model: str,
    *,
    stream: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
    idle_timeout: float | None = None,
) -> Any:
    """A Triton gRPC (``triton``) or OpenAI-compatible (``openai``, ``openai-chat``) streaming client.

    ``timeout`` bounds each whole request; ``idle_timeout`` (default 60 s, never above ``timeout``) each silence.
    """
    if protocol == "triton":
        return TritonTarget(url, model, stream, timeout, idle_timeout)
    if protocol in ("openai", "openai-chat"):
        return OpenAITarget(url, model, protocol == "openai-chat", timeout, idle_timeout)
    raise BenchError(f"unknown protocol {protocol!r}", "use triton, openai or openai-chat")


def run_load(
    target_kind: str,
    url: str,
    model: str,
    reqs: list[Request],
    load: Load,
    *,
    stream: bool = True,
    warmup: int = 1,
    seed: int = 0,
    timeout: float = DEFAULT_TIMEOUT_S,
    idle_timeout: float | None = None,
    stop_on_error: bool = False,
    chat: bool = False,
    max_conn_errors: int = 3,
    progress: Progress = silent,
    shard: Shard | None = None,
) -> RunOutcome:
    holder: dict[str, RunOutcome] = {}

    async def main() -> RunOutcome:
        target: Any = (
            TritonTarget(url, model, stream, timeout, idle_timeout)
            if target_kind == "triton"
            else OpenAITarget(url, model, chat, timeout, idle_timeout)
        )
        try:
            await target.check()
            if (
                target_kind == "triton"
                and any(r.num_draft_tokens for r in reqs)
                and "num_draft_tokens" not in target.inputs
            ):
                raise BenchError(
                    f"model {model!r} takes no num_draft_tokens",
                    "benchmark tensorrt_llm_bls of a draft-target repository, or drop --num-draft-tokens",
                )
            return await _run(target, reqs, load, warmup, seed, stop_on_error, max_conn_errors, holder, progress, shard)
        finally:
            with contextlib.suppress(Exception):
                await target.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        if "outcome" not in holder:
            raise
        out = holder["outcome"]
        out.halt("interrupted", INTERRUPTED)
        for rec in out.records:
            if rec.error is None and not rec.warmup and not rec.ok:
                rec.error, rec.error_kind = "cancelled", "cancelled"
        return out
