"""The load generator against a zero-delay server: chunks/s per client core, 1 → N workers, beside AIPerf.

A zero-delay OpenAI-compatible SSE server (asyncio, its own process, this file with ``--serve``) answers
every request with ``tokens`` one-token chunks at once, so the client is what is measured:

- chunks per client CPU-second (``client.cpu_s`` summed over the worker processes): the per-core rate;
- wall-clock chunks/s with 1 and N workers, and the per-core efficiency with N workers ÷ with 1 — the
  scaling a machine with N spare cores would see (the target is 0.8 × N, i.e. efficiency >= 0.8);
- the client's median TTFT minus the server's own (first token 20 ms after the request was read; same host
  clock), with 1 and with N workers at low concurrency: the per-request accuracy;
- AIPerf (``aiperf profile``, when installed in its own venv: AIPERF=/path/to/aiperf) on the same server
  and the same load, with 1 and N workers: wall time and output tokens/s from its own export.

Runs alternate (1, N, 1, N, ...) so drift on a shared machine hits both sides; figures are medians. On a
machine with fewer spare cores than N + 1 (the server needs one) the wall-clock scaling is bounded by the
cores, not the client: the report says how many cores there were.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import REPO, median, run_measured


async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first_s: float, stats: dict[str, Any]
) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # as production servers do: small SSE writes must not wait for delayed ACKs
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            got = time.perf_counter()
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length:")), 0)
            body = await reader.readexactly(length) if length else b""
            if method == "GET":
                out = json.dumps(stats if path == "/stats" else {"data": [{"id": "m"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
                await writer.drain()
                continue
            req = json.loads(body or b"{}")
            n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            if first_s:
                await asyncio.sleep(first_s)
            chunks = []
            for i in range(n):
                ev = b'data: {"object": "text_completion", "choices": [{"index": 0, "text": " w%d"}]}\n\n' % i
                chunks.append(b"%x\r\n%s\r\n" % (len(ev), ev))
                if i == 0:
                    writer.write(chunks.pop())
                    await writer.drain()
                    stats["server_ttft_s"].append(time.perf_counter() - got)
            usage = b'data: {"object": "text_completion", "choices": [], "usage": {"completion_tokens": %d}}\n\n' % n
            chunks.append(b"%x\r\n%s\r\n" % (len(usage), usage))
            done = b"data: [DONE]\n\n"
            chunks.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            writer.write(b"".join(chunks))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(first_s: float) -> None:
    """The zero-delay server: prints its URL, serves until killed."""
    stats: dict[str, Any] = {"server_ttft_s": []}

    async def main() -> None:
        srv = await asyncio.start_server(lambda r, w: _handle(r, w, first_s, stats), "127.0.0.1", 0)
        print(f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", flush=True)
        await srv.serve_forever()

    asyncio.run(main())


class Server:
    def __init__(self, first_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(first_s)], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def ours(url: str, workers: int, concurrency: int, requests: int, tokens: int) -> dict[str, float]:
    """One run of toolchain's load generator: wall, chunks, client CPU, TTFT median."""
    from toolchain.bench.options import BenchOptions
    from toolchain.bench.run import BenchWorkload, run_bench
    from toolchain.bench.workload import Request

    reqs = [Request(f"p{i}", 4, tokens) for i in range(requests + workers)]
    opts = BenchOptions(
        url=url, protocol="openai", concurrency=str(concurrency), requests=requests, warmup=workers, workers=workers
    )
    run = run_bench(opts, BenchWorkload(served="m", requests=reqs)).runs[0]
    recs = [r for r in run.records if not r.warmup and not r.error]
    chunks = sum(len(r.chunk_times) for r in recs)
    wall = run.summary.wall_s or 0.0
    cpu_s = run.client.cpu_s or 0.0
    return {
        "wall_s": wall,
        "chunks": chunks,
        "chunks_per_s": chunks / wall,
        "cpu_s": cpu_s,
        "chunks_per_cpu_s": chunks / max(1e-9, cpu_s),
        "ttft_ms_p50": median([r.ttft_ms for r in recs if r.ttft_ms is not None]),
        "completed": len(recs),
    }


def aiperf(exe: str, url: str, tok: Path, workers: int, concurrency: int, requests: int, tokens: int) -> dict[str, Any]:
    """One `aiperf profile` run on the same server and load; its wall/CPU from outside, tok/s from its export."""
    out = Path(tempfile.mkdtemp(prefix="aiperf-"))
    cmd = [
        exe,
        "profile",
        "--model",
        "m",
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(requests),
        "--tokenizer",
        str(tok),
        "--isl",
        "4",
        "--osl",
        str(tokens),
        "--use-legacy-max-tokens",
        "--workers-max",
        str(workers),
        "--ui",
        "none",
        "--output-artifact-dir",
        str(out),
        "--no-auto-plot",
    ]
    run = run_measured(cmd, log=out / "run.log")
    found = list(out.rglob("profile_export_aiperf.json"))
    res: dict[str, Any] = {"rc": run.returncode, "wall_s": run.wall_s, "cpu_s": run.cpu_s}
    if found:
        data = json.loads(found[0].read_text())
        tps = data.get("output_token_throughput") or {}
        res["tok_s"] = tps.get("avg") if isinstance(tps, dict) else tps
        res["completed"] = (data.get("request_count") or {}).get("avg")
    shutil.rmtree(out, ignore_errors=True)
    return res


def _tokenizer() -> Path:
    from toolchain.quantize.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(Path(tempfile.mkdtemp(prefix="tok-")) / "tiny-llama")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a run of seconds (tests/test_benchmarks.py)")
    ap.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=max(2, (os.cpu_count() or 2)))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.serve is not None:
        serve(a.serve)
        return
    n = a.workers
    conc, reqs, toks, rounds = (8, 40, 16, 1) if a.quick else (64, 640, 64, a.rounds)
    print(
        f"machine: {os.cpu_count()} CPU cores (the server takes one); load: concurrency {conc}, {reqs} requests "
        f"× {toks} one-token chunks, zero-delay server"
    )
    zero = Server(0.0)
    rows: dict[int, list[dict[str, float]]] = {1: [], n: []}
    try:
        for _ in range(rounds):
            for w in (1, n):
                rows[w].append(ours(zero.url, w, conc, reqs, toks))
    finally:
        zero.close()
    one, many = rows[1], rows[n]
    per_core_1 = median([r["chunks_per_cpu_s"] for r in one])
    per_core_n = median([r["chunks_per_cpu_s"] for r in many])
    wall_1, wall_n = median([r["chunks_per_s"] for r in one]), median([r["chunks_per_s"] for r in many])
    print(
        f"chunks per client CPU-second: 1 worker {per_core_1:,.0f}, {n} workers {per_core_n:,.0f} "
        f"(per-core efficiency {per_core_n / per_core_1:.2f}; target >= 0.8 → {n} workers ≈ "
        f"{n * per_core_n / per_core_1:.2f}× one on {n} spare cores)"
    )
    print(
        f"wall-clock chunks/s: 1 worker {wall_1:,.0f}, {n} workers {wall_n:,.0f} (scaling {wall_n / wall_1:.2f}× "
        f"on this {os.cpu_count()}-core machine, server included)"
    )
    delayed = Server(0.02)
    try:
        gaps: dict[int, list[float]] = {1: [], n: []}
        for _ in range(rounds):
            for w in (1, n):
                before = len(delayed.stats()["server_ttft_s"])
                r = ours(delayed.url, w, 4, 40, 8)
                srv = delayed.stats()["server_ttft_s"][before + w :]  # after each worker's warm-up
                gaps[w].append(r["ttft_ms_p50"] - median(srv) * 1000)
    finally:
        delayed.close()
    print(
        f"TTFT accuracy (client p50 - server p50, 20 ms first token, concurrency 4): 1 worker "
        f"{median(gaps[1]):.2f} ms, {n} workers {median(gaps[n]):.2f} ms"
    )
    exe = os.environ.get("AIPERF") or shutil.which("aiperf")
    if a.quick or not exe:
        print("AIPerf: " + ("skipped in --quick" if a.quick else "not installed (set AIPERF=/path/to/aiperf)"))
        return
    tok = _tokenizer()
    zero = Server(0.0)
    try:
        for w in (1, n):
            ap_res = aiperf(exe, zero.url, tok, w, conc, reqs, toks)
            mine = ours(zero.url, w, conc, reqs, toks)
            print(
                f"AIPerf {w} worker(s): rc {ap_res['rc']}, wall {ap_res['wall_s']:.1f} s (incl. start-up), CPU "
                f"{ap_res['cpu_s']:.1f} s, output tok/s {ap_res.get('tok_s')}; toolchain: {mine['chunks_per_s']:,.0f} "
                f"chunks/s, CPU {mine['cpu_s']:.1f} s"
            )
    finally:
        zero.close()


if __name__ == "__main__":
    main()
