"""One benchmark invocation: workload, load points (a sweep), metrics scrape, result document."""

from __future__ import annotations

import json
import math
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolchain import __version__, redact
from toolchain.artifacts.bench_result import (
    RESULT_SCHEMA,
    BenchResult,
    Load,
    LoadPoint,
    Search,
    build_point,
    build_result,
)
from toolchain.bench import prom, speculative
from toolchain.bench.loadgen import RunOutcome, run_load
from toolchain.bench.metrics import aggregate
from toolchain.bench.options import BenchOptions
from toolchain.bench.workload import Request
from toolchain.digest import atomic_write_text
from toolchain.errors import BenchError
from toolchain.progress import Progress, silent


@dataclass(frozen=True)
class BenchWorkload:
    """What a load test sends and measures against, as ``toolchain.bench.setup.make_config`` prepared it from the
    options (the spec, the repository marker, the tokenizer, the trace or dataset): the requests, how to make more,
    the SLOs, the provenance and the served model. How to send them (protocol, loads, warm-up, deadlines, workers) is
    the options' (``BenchOptions``). Frozen: a search's probe or an SLO override makes a new one
    (``dataclasses.replace``)."""

    served: str  # the model the requests name (--model, or the llmapi model of an llmapi --repo)
    requests: Sequence[Request]  # the warm-up, then the measured requests
    slo: dict[str, float | None] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    metrics_model: str = "tensorrt_llm"  # the model whose Prometheus metrics are the server's side
    # the first n requests of the workload's reproducible sequence (``requests`` is its head): an SLO search
    # sizes each probe to its load (toolchain.bench.search.probe_size); None: ``requests`` is all there is
    more: Callable[[int], list[Request]] | None = field(default=None, repr=False, compare=False)

    def requests_for(self, warmup: int, n: int) -> list[Request]:
        """The ``warmup`` requests and ``n`` measured ones: the workload's next ones (``more``), else ``requests``
        again from its start (a dataset's prompts are sent again in order)."""
        want = warmup + n
        if len(self.requests) >= want:
            return list(self.requests[:want])
        pool = list(self.requests)
        if self.more is not None:
            got = self.more(want)
            if len(got) >= want:
                return got[:want]
            pool = got if len(got) > len(pool) else pool  # a dataset file holds no more: send it again
        measured = pool[warmup:] or pool
        if not measured:
            return list(pool)
        return pool[:warmup] + [measured[i % len(measured)] for i in range(n)]


class _Sampler:
    def __init__(self, url: str | None, period: float = 1.0) -> None:
        self.url, self.period = url, period
        self.snaps: list[prom.Snapshot] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.snaps.append(prom.scrape(self.url or "", timeout=2))
            except Exception:
                continue

    def __enter__(self) -> _Sampler:
        if self.url:
            self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.url:
            self._t.join(3)


def run_bench(opts: BenchOptions, work: BenchWorkload, progress: Progress = silent) -> BenchResult:
    """Measure every load point of ``opts`` in turn; a server lost after the first one keeps what was measured."""
    runs: list[LoadPoint] = []
    interrupted = None
    stop = None
    for load in opts.loads:
        run, interrupted, stop = measure_point(opts, work, load, progress, first=not runs)
        if run is not None:
            runs.append(run)
        if stop is not None:
            break
    return _result_document(opts, work, runs, interrupted, stop)


def measure_point(
    opts: BenchOptions, work: BenchWorkload, load: Load, progress: Progress, *, first: bool
) -> tuple[LoadPoint | None, str | None, str | None]:
    """One load point: its result entry (None when the server was gone before it), and why the run must stop.

    The first point of a run raises the plain BenchError when the server cannot be reached: nothing was
    measured, so the error is the whole story. Later points keep what was measured and say why they stopped.
    """
    progress(f"load {load.label()}: {len(work.requests)} requests ({opts.warmup} warm-up)")
    try:
        before = prom.scrape(opts.metrics_url) if opts.metrics_url else None
    except BenchError:
        if first:
            raise
        before = None
    started = time.time()
    with _Sampler(opts.metrics_url) as sampler:
        try:
            out = _run_load(opts, work, load, progress)
        except BenchError as e:
            if first:
                raise
            # the server went away between load points: keep what was measured
            return None, f"server unreachable before {load.label()}: {e.message}", "server-gone"
    server = _server_window(opts, work, before, sampler.snaps)
    return _load_point(work, load, out, server, started), out.interrupted, out.stop


def _run_load(opts: BenchOptions, work: BenchWorkload, load: Load, progress: Progress) -> RunOutcome:
    """One load point's requests against the server, as ``opts`` say to send them (in ``opts.workers``
    processes)."""
    if opts.workers > 1:
        from toolchain.bench.workers import run_load_workers

        return run_load_workers(opts, work.served, work.requests, load, progress)
    return run_load(
        opts.wire,
        opts.url,
        work.served,
        list(work.requests),
        load,
        stream=opts.stream,
        warmup=opts.warmup,
        seed=opts.seed,
        timeout=opts.timeout,
        idle_timeout=opts.idle_timeout,
        stop_on_error=opts.stop_on_error,
        chat=opts.chat,
        progress=progress,
    )


def _server_window(
    opts: BenchOptions, work: BenchWorkload, before: prom.Snapshot | None, snaps: list[prom.Snapshot]
) -> dict[str, Any] | None:
    """Server-side metrics over the load point (None without a metrics URL; ``error`` when the scrape failed)."""
    if not (opts.metrics_url and before is not None):
        return None
    try:
        after = prom.scrape(opts.metrics_url)
        window = prom.server_side(before, after, [*snaps, after], work.metrics_model, served=work.served)
    except Exception as e:  # the server may be gone; keep the client side
        return {"error": str(e)}
    # a summary quantile with no observation reads NaN: that figure was not measured, so it is left out
    return {k: v for k, v in window.items() if not (isinstance(v, float) and not math.isfinite(v))}


def _load_point(
    work: BenchWorkload, load: Load, out: RunOutcome, server: dict[str, Any] | None, started: float
) -> LoadPoint:
    """The result entry of one measured load point: summary, server and client sides, raw records (checked against
    the result model: a writer's mistake is a ValueError naming the field)."""
    summary = aggregate(out.records, out.wall_s, work.slo)
    measured = [r for r in out.records if not r.warmup]
    chunks = sum(len(r.chunk_times) for r in measured)
    client: dict[str, Any] = {
        "cpu_s": out.client_cpu_s,
        "cpu_ms_per_request": out.client_cpu_s * 1000 / max(1, len(measured)),
        "cpu_ms_per_chunk": out.client_cpu_s * 1000 / max(1, chunks),
    }
    client.update(client_health(out))
    if out.workers:
        client["workers"] = out.workers
    return build_point(
        {
            "load": load.model_dump(),
            "label": load.label(),
            "summary": summary,
            "server": server,
            "client": client,
            "records": [r.record() for r in out.records],
            "prefix": _prefix_proof(out.records),
            "speculative": speculative.summary(out.records),
            "interrupted": out.interrupted,
            "stop": out.stop,
            "window": {"start": started, "end": time.time()},
        }
    )


def _result_document(
    opts: BenchOptions,
    work: BenchWorkload,
    runs: list[LoadPoint],
    interrupted: str | None,
    stop: str | None,
    search: Search | None = None,
) -> BenchResult:
    """The saved bench result: provenance of the run, its load points, why it stopped early (if it did) and the
    SLO search (if one ran), built through the result model (toolchain.bench.result)."""
    doc: dict[str, Any] = {
        "kind": "toolchain.bench-result",
        "schema": RESULT_SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # written to a file that is shared: no credentials of the server's URL or of the command line
        "provenance": {
            **{k: redact.text(v) if isinstance(v, str) else v for k, v in work.provenance.items()},
            "url": redact.url(opts.url),
            "model": work.served,
            "protocol": opts.wire,
            "stream": opts.stream,
            "command": redact.argv(sys.argv),
            "toolchain": __version__,
            "host": platform.node(),
        },
        "runs": runs,
        "interrupted": interrupted,
        "stop": stop,
    }
    if search is not None:
        doc["search"] = search
    return build_result(doc)


LATE_SEND_S = 0.05  # a send this late is the client's fault, not the server's
LOOP_LAG_WARN_S = 0.025  # event-loop lag p99 above this inflates every latency the client measures
CPU_BUSY = 0.9  # client CPU seconds per wall second


def _p99(xs: list[float]) -> float:
    return sorted(xs)[int(0.99 * (len(xs) - 1))]


def client_health(out: Any) -> dict[str, Any]:
    """Send lag, event-loop lag and CPU use of the load generator, with warnings when it is the bottleneck."""
    client: dict[str, Any] = {}
    warnings: list[str] = []
    if out.lag_s:
        late = [x for x in out.lag_s if x > LATE_SEND_S]
        client["send_lag_ms_p99"] = _p99(out.lag_s) * 1000
        client["late_sends"] = len(late)
        if len(late) > 0.05 * len(out.lag_s):
            warnings.append(
                f"the client could not keep the requested rate: {len(late)} of "
                f"{len(out.lag_s)} requests went out more than {LATE_SEND_S * 1000:.0f} ms late"
            )
    if out.loop_lag_s:
        lag = _p99(out.loop_lag_s)
        client["loop_lag_ms_p99"] = lag * 1000
        client["loop_lag_ms_max"] = max(out.loop_lag_s) * 1000
        if lag > LOOP_LAG_WARN_S:
            warnings.append(
                f"the client is the bottleneck: its event loop lagged {lag * 1000:.0f} ms (p99), so every latency "
                "it measured is inflated; use fewer concurrent requests per client or a faster machine"
            )
    procs = max(1, len(getattr(out, "workers", None) or []))  # --workers N: N processes share the CPU seconds
    if out.wall_s > 0 and out.client_cpu_s / out.wall_s / procs > CPU_BUSY:
        busy = out.client_cpu_s / out.wall_s / procs
        each = " (each of its processes)" if procs > 1 else ""
        warnings.append(f"the client{each} used {busy:.0%} of a CPU during the run; its timings may be late")
    if warnings:
        client["warnings"] = warnings
        client["warning"] = "; ".join(warnings)
    return client


def assess(result: BenchResult) -> tuple[int, str | None]:
    """Exit code and reason: 0 only when every load point asked for was measured with some successful requests.

    130 for Ctrl-C, 1 when the server went away, the run stopped on an error, or a load point has no
    successful request (every request failed, or the answers were unusable). An SLO search is judged by
    its own rule (toolchain.bench.search.assess_search, chosen by toolchain.pipeline.bench.assess): a probe
    that fails is an answer, not an error.
    """
    if result.stop == "interrupted":
        return 130, "interrupted by Ctrl-C"
    if result.stop is not None:
        return 1, str(result.interrupted)
    for run in result.runs:
        s = run.summary
        if s.requests and not s.completed:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(s.error_kinds.items()))
            first = next((r.error for r in run.records if r.error and not r.warmup), None)
            said = f"; first: {first[:200]}" if first else ""  # in the server's words: the fix is often there
            return 1, f"all {s.requests} requests at {run.label} failed ({kinds}){said}"
    if not result.runs:
        return 1, "no load point was measured"
    return 0, None


def _prefix_proof(records: list[Any]) -> dict[str, Any] | None:
    """TTFT of shared-prefix vs unique prompts, next to the blocks the server says it reused."""
    shared = [r for r in records if r.shared_prefix is True and r.ok and not r.warmup]
    unique = [r for r in records if r.shared_prefix is False and r.ok and not r.warmup]
    if not shared and not unique:
        return None

    def med(xs: list[float]) -> float | None:
        xs = sorted(xs)
        return xs[len(xs) // 2] * 1000 if xs else None

    return {
        "shared_requests": len(shared),
        "unique_requests": len(unique),
        "shared_ttft_ms_p50": med([r.ttft for r in shared]),
        "unique_ttft_ms_p50": med([r.ttft for r in unique]),
        "shared_reused_blocks_mean": (sum(r.perf.get("kv_cache_reused_blocks", 0) for r in shared) / len(shared))
        if shared
        else None,
        "unique_reused_blocks_mean": (sum(r.perf.get("kv_cache_reused_blocks", 0) for r in unique) / len(unique))
        if unique
        else None,
    }


def without_records(result: BenchResult) -> dict[str, Any]:
    """The result's JSON document without per-request raw timings (for terminals and summaries)."""
    doc = result.document()
    return doc | {"runs": [{k: v for k, v in r.items() if k != "records"} for r in doc["runs"]]}


def save(result: BenchResult, path: Path) -> None:
    """Write the result's JSON document (the model was checked when it was built: a writer's mistake never reaches
    a file)."""
    atomic_write_text(path, json.dumps(result.document(), indent=1))
