#!/usr/bin/env python
"""OCI registry benchmark: push and pull of one engine (default 2 GB: two ranks and a config), side by side
in one run (medians of --runs; the sides alternate which goes first):

1. the toolchain to an oci:// registry (CNCF distribution, Debian's docker-registry, started here on
   127.0.0.1 with its storage in a temp dir) vs a plain client of the distribution API moving the same
   bytes: oras-py 0.2.43 (`push` chunked with the same 64 MiB chunks, `pull`), to fresh repositories of
   the same server. Like with like: both send and fetch every byte over the same loopback; the toolchain
   also hashes as it sends and verifies every digest as it pulls, oras-py verifies nothing on pull;
2. the same engine through the local directory backend and the S3 backend (moto on 127.0.0.1);
3. push I/O: bytes read by the OCI push (`rchar`, target 1.0x: one pass) and what a second push of the
   unchanged engine sends (HEAD finds every blob: nothing).

Each push starts from an empty stat cache (a first push: every file is read and hashed).
Usage: .venv/bin/python benchmarks/oci_bench.py [--quick] [--size-gb 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import median, pair_ratio, timed, verdict
from benchmarks.registry_bench import make_engine, rchar
from tests.servers import start_moto, start_registry, stop

TARGET_READS = 1.05
CHUNK = 64 * 2**20


CACHES = Path(tempfile.gettempdir())  # set to the work directory by main, so each run removes its caches


def fresh_cache() -> None:
    """A new, empty toolchain cache (no stat-cache digests): the next Registry hashes every file."""
    os.environ["TOOLCHAIN_CACHE"] = tempfile.mkdtemp(prefix="cache-", dir=CACHES)


def alternate(i: int, sides: list[tuple[str, Callable[[], object]]], into: dict[str, list[float]]) -> None:
    for name, fn in sides if i % 2 == 0 else sides[::-1]:
        into.setdefault(name, []).append(timed(fn))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="64 MB engine, one run")
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    size_gb, runs = (0.064, 1) if args.quick else (args.size_gb, args.runs)
    global CACHES
    os.environ["TOOLCHAIN_OCI_PLAIN_HTTP"] = "1"
    import oras.client

    from toolchain.registry import open_registry

    work = Path(tempfile.mkdtemp(prefix="ocibench-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    CACHES = work
    fresh_cache()
    srv = start_registry(work)
    moto, s3_url = start_moto(work / "moto.log")
    try:
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1",
                "TOOLCHAIN_S3_ENDPOINT_URL": s3_url,
            }
        )
        import boto3

        s3 = boto3.client("s3", endpoint_url=s3_url)
        s3.create_bucket(Bucket="bench")
        src = work / "engine"
        make_engine(src, int(size_gb * 1e9))
        files = sorted(str(p) for p in src.iterdir())
        data = sum(p.stat().st_size for p in src.iterdir())
        oras_client = oras.client.OrasClient(hostname=srv.host, insecure=True)
        key = "b" * 64
        t: dict[str, list[float]] = {}
        reads: list[float] = []
        for i in range(runs):
            oci_url = srv.url(f"bench/toolchain{i}")
            oras_ref = f"{srv.host}/bench/oras{i}:v1"

            def oci_push(url: str = oci_url) -> None:
                fresh_cache()
                before = rchar()
                open_registry(url).put(key, src)
                reads.append((rchar() - before) / data)

            def oras_push(ref: str = oras_ref) -> None:
                oras_client.push(
                    target=ref, files=files, disable_path_validation=True, do_chunked=True, chunk_size=CHUNK, quiet=True
                )

            alternate(i, [("oci push", oci_push), ("oras push", oras_push)], t)
            alternate(
                i,
                [
                    ("oci pull", partial(open_registry(oci_url).get, key, work / f"oci{i}")),
                    ("oras pull", partial(oras_client.pull, target=oras_ref, outdir=str(work / f"oras{i}"))),
                ],
                t,
            )
            assert sorted(p.name for p in (work / f"oras{i}").iterdir()) == sorted(p.name for p in src.iterdir())
            other_backends(i, src, work, key, t)
            for d in (f"oci{i}", f"oras{i}"):
                shutil.rmtree(work / d)
        # pushing the unchanged engine again: from a machine that never hashed it (files above the in-memory
        # size stream while they are hashed, so they are sent again), then from this one (digests known: HEAD
        # finds every blob, nothing is sent)
        fresh_cache()
        sent = []
        for k in ("e" * 64, "f" * 64):
            again = open_registry(srv.url("bench/toolchain0"))
            b: Any = again.backend
            b.requests.clear()
            again.put(k, src)
            sent.append(sum(1 for m, _ in b.requests if m == "POST"))

        def r(a: str, c: str) -> float:
            return pair_ratio(t[a], t[c])

        print(f"engine of {size_gb:g} GB ({data / 1e9:.2f} GB in {len(files)} files), {runs} run(s); medians")
        print(
            f"  OCI push: toolchain {median(t['oci push']):.2f} s vs oras-py {median(t['oras push']):.2f} s "
            f"-> ratio {r('oci push', 'oras push'):.2f}x the time (toolchain hashes while it sends)"
        )
        print(
            f"  OCI pull: toolchain {median(t['oci pull']):.2f} s vs oras-py {median(t['oras pull']):.2f} s "
            f"-> ratio {r('oci pull', 'oras pull'):.2f}x the time (toolchain verifies every digest; oras-py none)"
        )
        print(
            f"  backends: push local {median(t['local push']):.2f} s, S3 {median(t['s3 push']):.2f} s, "
            f"OCI {median(t['oci push']):.2f} s -> OCI/local {r('oci push', 'local push'):.2f}x, "
            f"OCI/S3 {r('oci push', 's3 push'):.2f}x; pull local {median(t['local pull']):.2f} s, "
            f"S3 {median(t['s3 pull']):.2f} s, OCI {median(t['oci pull']):.2f} s -> OCI/local "
            f"{r('oci pull', 'local pull'):.2f}x, OCI/S3 {r('oci pull', 's3 pull'):.2f}x"
        )
        print(
            f"  OCI push I/O: read {median(reads):.2f}x the data ({verdict(median(reads), TARGET_READS)}); "
            f"pushing it unchanged again: {sent[0]} uploads from a machine that never hashed it (streamed "
            f"files are sent as they are hashed), {sent[1]} from one that did "
            "(HEAD found every file blob; the push's record is new)"
        )
        return 0
    finally:
        stop(moto)
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def other_backends(i: int, src: Path, work: Path, key: str, t: dict[str, list[float]]) -> None:
    """The same push and pull through the local directory and S3 (moto) backends."""
    import boto3

    from toolchain.registry import open_registry

    local_url, s3_url = str(work / f"local{i}"), f"s3://bench/run{i}"

    def push(url: str) -> None:
        fresh_cache()
        open_registry(url).put(key, src)

    alternate(i, [("local push", partial(push, local_url)), ("s3 push", partial(push, s3_url))], t)
    alternate(
        i,
        [
            ("local pull", partial(open_registry(local_url).get, key, work / f"l{i}")),
            ("s3 pull", partial(open_registry(s3_url).get, key, work / f"s{i}")),
        ],
        t,
    )
    shutil.rmtree(work / f"l{i}")
    shutil.rmtree(work / f"s{i}")
    shutil.rmtree(local_url)
    s3 = boto3.client("s3", endpoint_url=os.environ["TOOLCHAIN_S3_ENDPOINT_URL"])
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=f"run{i}/"):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket="bench", Key=obj["Key"])  # moto holds objects in memory


if __name__ == "__main__":
    sys.exit(main())
