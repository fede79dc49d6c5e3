"""The load generator in N processes (``toolchain bench --workers N``), so one host can drive a fleet.

The parent splits one load point between the workers: a concurrency ``c`` as ``c // N`` (+1 for the first
``c % N``) closed-loop streams each, with the request budget dealt out in proportion; an open-loop load
(rate or trace) by computing every send offset once, here, and dealing the requests round-robin, so the
merged schedule is exactly the single-process one. Each worker connects, checks the server and sends its
warm-up, then reports ready; the parent then picks one start time on the shared clock (``perf_counter``,
CLOCK_MONOTONIC on Linux: one clock for every process on the host) and every worker sends against it.
The per-request timestamps come back on that one clock and are merged as they are; a worker whose clock
is measured to differ (a platform without a host-wide monotonic clock) is shifted onto the parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

from toolchain.artifacts.bench_result import Load
from toolchain.bench.loadgen import INTERRUPTED, RunOutcome, Shard, run_load
from toolchain.bench.options import BenchOptions
from toolchain.bench.workload import Request, send_offsets
from toolchain.errors import BenchError
from toolchain.progress import Progress

START_MARGIN_S = 0.05  # between the last "ready" and the common start: time for the "go" to reach everyone
READY_TIMEOUT_S = 120.0  # a worker imports, connects, checks the server and warms up within this
SHARED_CLOCK_S = 0.1  # a measured offset above this means the worker's clock is not the parent's
STOP_ORDER = ("interrupted", "server-gone", "stop-on-error")


def split(load: Load, todo: list[Request], workers: int, seed: int) -> list[tuple[Load, Shard, list[Request]]]:
    """Each worker's load, shard (global indices, offsets) and requests; fewer workers than streams at most."""
    if load.concurrency is not None:
        n = max(1, min(workers, load.concurrency))
        conc = [load.concurrency // n + (1 if i < load.concurrency % n else 0) for i in range(n)]
        slots = [w for w in range(n) for _ in range(conc[w])]  # worker w appears once per stream it runs
        mine: list[list[int]] = [[] for _ in range(n)]
        for j in range(len(todo)):
            mine[slots[j % len(slots)]].append(j)
        return [
            (load.model_copy(update={"concurrency": conc[w]}), Shard(indices=mine[w]), [todo[j] for j in mine[w]])
            for w in range(n)
            if mine[w]
        ]
    offsets = send_offsets(load, todo, seed)
    n = max(1, min(workers, len(todo)))
    out = []
    for w in range(n):
        js = list(range(w, len(todo), n))
        out.append((load, Shard(indices=js, offsets=[offsets[j] for j in js]), [todo[j] for j in js]))
    return out


def run_load_workers(
    opts: BenchOptions, served: str, requests: Sequence[Request], load: Load, progress: Progress
) -> RunOutcome:
    """One load point of ``requests`` (the warm-up first) to the model ``served``, sent as ``opts`` say from
    ``opts.workers`` processes; the merged outcome as if one client had sent it."""
    warm, todo = list(requests[: opts.warmup]), list(requests[opts.warmup :])
    parts = split(load, todo, opts.workers, opts.seed)
    ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads and tokenizers
    procs: list[Any] = []
    conns: list[Connection] = []
    for w, (wload, shard, reqs) in enumerate(parts):
        # the indices shift past the warm-up, as in the single-process numbering
        shard.indices = [opts.warmup + j for j in shard.indices]
        job = {
            "protocol": opts.wire,
            "url": opts.url,
            "model": served,
            "stream": opts.stream,
            "timeout": opts.timeout,
            "idle_timeout": opts.idle_timeout,
            "chat": opts.chat,
            "stop_on_error": opts.stop_on_error,
            "seed": opts.seed,
            "load": wload,
            "requests": [*warm, *reqs],
            "warmup": len(warm),
            "indices": shard.indices,
            "offsets": shard.offsets,
            "worker": w,
        }
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(child, job), name=f"toolchain-bench-worker-{w}", daemon=True)
        with _main_not_reimported():
            p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    try:
        return _drive(procs, conns, load, len(todo), progress)
    finally:
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start a spawned worker without it re-running the parent's ``__main__`` script: the worker's code lives
    in this module, and a script without a ``__name__ == "__main__"`` guard would otherwise run again in it."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__.pop(k) for k in ("__file__",) if main is not None and k in main.__dict__}
    spec = getattr(main, "__spec__", None)
    if main is not None:
        main.__spec__ = None
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            main.__spec__ = spec


def _drive(procs: list[Any], conns: list[Connection], load: Load, total: int, progress: Progress) -> RunOutcome:
    """Wait for every worker to be ready, start them on one clock, follow their progress, merge their outcomes."""
    stage = f"{load.label()} requests"
    deadline = time.monotonic() + READY_TIMEOUT_S
    for w, c in enumerate(conns):

        def waiting(w: int = w) -> None:  # a counted stage: a line every few seconds while workers start
            progress(f"{load.label()}: load-generator workers ready", w, len(conns), unit="worker")

        msg = _recv(c, deadline, procs[w], f"worker {w}", waiting)
        if msg[0] == "error":
            raise BenchError(msg[1], msg[2] or None)
    clocks = [_clock(c, deadline, procs[w], f"worker {w}") for w, c in enumerate(conns)]
    offsets = [off if abs(off) > SHARED_CLOCK_S else 0.0 for off, _ in clocks]
    t0 = time.perf_counter() + START_MARGIN_S
    for c, off in zip(conns, offsets, strict=True):
        c.send(("go", t0 - off))
    done = [0] * len(conns)
    outcomes: list[RunOutcome | None] = [None] * len(conns)
    interrupted = False
    while any(o is None for o in outcomes):
        try:
            _collect(conns, procs, outcomes, done)
        except KeyboardInterrupt:
            if interrupted:  # a second Ctrl-C: stop waiting for what the workers still hold
                break
            interrupted = True
            for p in procs:  # the workers keep their own results and send them back
                with contextlib.suppress(OSError):
                    if p.is_alive() and p.pid:
                        os.kill(p.pid, signal.SIGINT)
        progress(stage, sum(done), total, unit="req")
    merged = _merge([o for o in outcomes if o is not None], offsets, t0)
    for info, (off, rtt) in zip(merged.workers, clocks, strict=False):
        info["clock_offset_ms"], info["clock_rtt_ms"] = off * 1000, rtt * 1000
        info["clock_shifted_ms"] = offsets[info["worker"]] * 1000
    if interrupted:
        merged.halt("interrupted", INTERRUPTED)
    return merged


def _clock(c: Connection, deadline: float, proc: Any, who: str) -> tuple[float, float]:
    """The worker's clock minus ours, from one ping (NTP-style midpoint), and the round trip that bounds it.

    With one host-wide clock the offset is within ±rtt/2 of zero; a larger one means the worker's clock is
    another clock, and its timestamps are shifted onto ours.
    """
    t1 = time.perf_counter()
    c.send(("ping",))
    msg = _recv(c, deadline, proc, who)
    t2 = time.perf_counter()
    return float(msg[1]) - (t1 + t2) / 2, t2 - t1


def _recv(c: Connection, deadline: float, proc: Any, who: str, waiting: Callable[[], None] = lambda: None) -> Any:
    gone = f"load-generator {who} exited before it was ready"
    while not c.poll(0.5):
        waiting()
        if not proc.is_alive():
            raise BenchError(f"{gone} (code {proc.exitcode})", "run with --workers 1 to see the client's own error")
        if time.monotonic() > deadline:
            raise BenchError(f"load-generator {who} was not ready within {READY_TIMEOUT_S:.0f} s")
    try:
        return c.recv()
    except (EOFError, OSError) as e:
        raise BenchError(gone, "run with --workers 1 to see the client's own error") from e


def _collect(conns: list[Connection], procs: list[Any], outcomes: list[RunOutcome | None], done: list[int]) -> None:
    """Read whatever the workers sent within a second: progress counts and final outcomes."""
    from multiprocessing.connection import wait

    live = [c for c, o in zip(conns, outcomes, strict=True) if o is None]
    for ready in wait(live, timeout=1.0):
        w = next(i for i, c in enumerate(conns) if c is ready)
        try:
            msg: Any = conns[w].recv()
        except (EOFError, OSError):
            why = f"load-generator worker {w} died (code {procs[w].exitcode})"
            outcomes[w] = RunOutcome([], 0.0, why, "server-gone")
            continue
        if msg[0] == "n":
            done[w] = int(msg[1])
        elif msg[0] == "done":
            outcomes[w] = msg[1]
            done[w] = len([r for r in msg[1].records if not r.warmup])
        elif msg[0] == "error":
            outcomes[w] = RunOutcome([], 0.0, f"worker {w}: {msg[1]}", "server-gone")


def _merge(outs: list[RunOutcome], offsets: list[float], t0: float) -> RunOutcome:
    """One outcome from the workers': records on the parent's clock, the longest wall, the summed CPU."""
    records = []
    for out, off in zip(outs, offsets, strict=False):
        if off:
            for r in out.records:
                r.sent += off
                r.chunk_times = [t + off for t in r.chunk_times]
                if r.scheduled is not None:
                    r.scheduled += off
        records.extend(out.records)
    records.sort(key=lambda r: (not r.warmup, r.index))
    merged = RunOutcome(
        records,
        max((o.wall_s for o in outs), default=0.0),
        client_cpu_s=sum(o.client_cpu_s for o in outs),
        lag_s=[x for o in outs for x in o.lag_s],
        loop_lag_s=[x for o in outs for x in o.loop_lag_s],
    )
    merged.workers = [
        {
            "worker": i,
            "requests": len([r for r in o.records if not r.warmup]),
            "cpu_s": o.client_cpu_s,
            "wall_s": o.wall_s,
        }
        for i, (o, off) in enumerate(zip(outs, offsets, strict=False))
    ]
    for kind in STOP_ORDER:
        hit = next((o for o in outs if o.stop == kind), None)
        if hit is not None:
            merged.halt(kind, str(hit.interrupted))
            break
    return merged


def _worker_main(conn: Connection, job: dict[str, Any]) -> None:
    """One worker process: connect and warm up, report ready, send its share from the common start, report back."""
    state = {"last": 0.0}

    def tick(
        stage: str, done: float | None = None, total: float | None = None, *, unit: str = "", message: str | None = None
    ) -> None:
        now = time.monotonic()
        if done is not None and now - state["last"] > 0.5:
            state["last"] = now
            with contextlib.suppress(OSError):
                conn.send(("n", int(done)))

    shard = Shard(indices=job["indices"], offsets=job["offsets"])

    async def ready() -> None:
        conn.send(("ready",))
        while True:
            msg = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            if msg[0] == "ping":  # the parent reads our clock
                conn.send(("pong", time.perf_counter()))
            elif msg[0] == "go":
                shard.t0 = float(msg[1])
                return

    shard.ready = ready
    try:
        out = run_load(
            job["protocol"],
            job["url"],
            job["model"],
            job["requests"],
            job["load"],
            stream=job["stream"],
            warmup=job["warmup"],
            seed=job["seed"],
            timeout=job["timeout"],
            idle_timeout=job["idle_timeout"],
            stop_on_error=job["stop_on_error"],
            chat=job["chat"],
            progress=tick,
            shard=shard,
        )
    except BenchError as e:
        with contextlib.suppress(OSError):
            conn.send(("error", e.message, e.hint))
        return
    except KeyboardInterrupt:
        out = RunOutcome([], 0.0, INTERRUPTED, "interrupted")
    with contextlib.suppress(OSError):
        conn.send(("done", out))
