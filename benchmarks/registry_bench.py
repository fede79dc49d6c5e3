#!/usr/bin/env python
"""Registry benchmarks, each measured side by side in one run (medians of --runs):

1. local restore (`Registry.get`: a reflink or a copy hashed on the way, digests verified) vs `cp -r`;
2. hashing: the registry's blake3 (`hash_file`) vs the blake3 package's own multi-threaded hashing of
   the same file (`blake3(max_threads=AUTO).update_mmap`, what `b3sum` does; b3sum itself is not
   installed here), plus hashlib sha256 vs `sha256sum` for reference;
3. push I/O: bytes read (`rchar` in /proc/self/io) by `Registry.put` for a new directory, over the
   data size (target 1.0x: one read pass), and for pushing the unchanged directory again;
4. S3 get vs plain boto3: `Registry.get` from s3:// vs `download_file` of the same blobs with the
   same TransferConfig, against the same moto server on 127.0.0.1. Like with like: both fetch the
   same bytes with the same transfer settings; the registry also verifies each digest.

Usage: .venv/bin/python benchmarks/registry_bench.py [--quick] [--size-gb 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import median, pair_ratio, timed, verdict
from tests.servers import start_moto, stop

TARGET_HASH = 0.9
TARGET_READS = 1.05


def make_engine(d: Path, size: int) -> None:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {}}')
    for rank in range(2):
        chunk = os.urandom(64 * 2**20)  # each rank its own bytes: two blobs, as a TP=2 engine has
        with open(d / f"rank{rank}.engine", "wb") as f:
            left = size // 2
            while left > 0:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="128 MB engine, one run")
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    size_gb, runs = (0.128, 1) if args.quick else (args.size_gb, args.runs)
    os.environ["TOOLCHAIN_CACHE"] = tempfile.mkdtemp(prefix="bench-cache-")
    import blake3

    from toolchain.digest import hash_file
    from toolchain.registry import open_registry

    work = Path(tempfile.mkdtemp(prefix="regbench-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        src = work / "engine"
        make_engine(src, int(size_gb * 1e9))
        data = sum(f.stat().st_size for f in src.iterdir())
        reg = open_registry(str(work / "reg"))
        before = rchar()
        put_s = timed(lambda: reg.put(None, src))
        first = (rchar() - before) / data
        before = rchar()
        again_s = timed(lambda: reg.put(None, src))
        again = rchar() - before
        print(f"engine of {size_gb:g} GB, {runs} run(s)")
        print(
            f"  push: read {first:.2f}x the data ({put_s:.2f} s; {verdict(first, TARGET_READS)}); "
            f"pushing it unchanged again read {again} bytes ({again_s:.3f} s)"
        )
        key = reg.put(None, src).key

        ours, cp = [], []
        for i in range(runs):
            ours.append(timed(partial(reg.get, key, work / f"get{i}")))
            cp.append(timed(partial(subprocess.run, ["cp", "-r", str(src), str(work / f"cp{i}")], check=True)))
            shutil.rmtree(work / f"get{i}")
            shutil.rmtree(work / f"cp{i}")
        mo, mc = median(ours), median(cp)
        print(
            f"  local restore: registry get {mo:.3f} s vs cp -r {mc:.3f} s -> cp -r takes {mc / mo:.1f}x as long "
            f"({','.join(sorted(getattr(reg.backend, 'restore_methods', ())))}, every digest verified)"
        )

        big = src / "rank0.engine"
        gb = big.stat().st_size / 1e9

        def b3_baseline() -> None:
            h = blake3.blake3(max_threads=blake3.blake3.AUTO)
            h.update_mmap(str(big))
            h.hexdigest()

        ours_h, base_h, sh, ss = [], [], [], []
        for _ in range(max(runs, 7) if not args.quick else 1):  # short: alternate A, B and take pair ratios
            ours_h.append(timed(lambda: hash_file(big, "blake3")))
            base_h.append(timed(b3_baseline))
        for _ in range(runs):
            sh.append(timed(lambda: hash_file(big, "sha256")))
            ss.append(timed(lambda: subprocess.run(["sha256sum", str(big)], check=True, capture_output=True)))
        r = pair_ratio(base_h, ours_h)
        print(
            f"  hashing {gb:.2f} GB (warm): registry blake3 {gb / median(ours_h):.2f} GB/s vs the blake3 "
            f"package's multi-threaded update_mmap {gb / median(base_h):.2f} GB/s -> {r:.2f}x "
            f"({verdict(r, TARGET_HASH, higher_is_better=True)}); sha256 (hashlib) {gb / median(sh):.2f} GB/s, "
            f"sha256sum {gb / median(ss):.2f} GB/s"
        )
        s3_bench(src, work, runs, key)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def s3_bench(src: Path, work: Path, runs: int, key: str) -> None:
    moto, url = start_moto(work / "moto.log")
    try:
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1",
                "TOOLCHAIN_S3_ENDPOINT_URL": url,
            }
        )
        import boto3

        from toolchain.registry import open_registry
        from toolchain.registry.store import blob_path

        boto3.client("s3", endpoint_url=url).create_bucket(Bucket="bench")
        reg = open_registry("s3://bench/reg")
        m = reg.put(key, src)
        backend = reg.backend
        s3, transfer = backend.s3, backend.transfer  # type: ignore[attr-defined]

        def plain(dest: Path) -> None:
            dest.mkdir()
            for rel, f in m.files.items():
                s3.download_file("bench", f"reg/{blob_path(f.digest)}", str(dest / rel), Config=transfer)

        push_s3(src, work, runs, transfer, s3)
        ours, base = [], []
        for i in range(runs):
            ours.append(timed(partial(reg.get, key, work / f"s3get{i}")))
            base.append(timed(partial(plain, work / f"s3plain{i}")))
            shutil.rmtree(work / f"s3get{i}")
            shutil.rmtree(work / f"s3plain{i}")
        mo, mb = median(ours), median(base)
        print(
            f"  S3 get (moto on 127.0.0.1): registry {mo:.2f} s (digests verified) vs boto3 download_file with "
            f"the same TransferConfig {mb:.2f} s -> {mo / mb:.2f}x the time"
        )
    finally:
        stop(moto)


def push_s3(src: Path, work: Path, runs: int, transfer: Any, s3: Any) -> None:
    """`Registry.put` to a fresh s3:// prefix vs boto3 `upload_file` of the same files with the same
    TransferConfig, files in parallel as the registry sends them. Each registry push reads a fresh copy
    of the engine (new inodes: no digest known from the stat cache), so it pays its hashing pass, as a
    first push of a new engine does. `rchar` counts read() calls, so it shows boto3's own reads (body,
    payload signature and checksum over plain HTTP) but not the registry's memory-mapped hashing pass."""
    from toolchain.registry import open_registry

    ours: list[float] = []
    base: list[float] = []
    reads: list[float] = []
    base_reads: list[float] = []
    for i in range(runs):
        fresh = work / f"s3src{i}"
        shutil.copytree(src, fresh)
        os.sync()  # the copy's dirty pages are written before either side is timed
        size = sum(f.stat().st_size for f in fresh.iterdir())
        reg = open_registry(f"s3://bench/push{i}")

        def plain(i: int = i, fresh: Path = fresh) -> None:  # files in parallel, as the registry sends blobs
            with ThreadPoolExecutor(max_workers=8) as pool:
                jobs = [
                    pool.submit(s3.upload_file, str(f), "bench", f"plain{i}/{f.name}", Config=transfer)
                    for f in sorted(fresh.iterdir())
                ]
                for j in jobs:
                    j.result()

        sides: list[tuple[str, Callable[[], object]]] = [("registry", partial(reg.put, None, fresh)), ("plain", plain)]
        for side, fn in sides if i % 2 == 0 else sides[::-1]:  # alternate which side goes first
            before = rchar()
            took = timed(fn)
            (ours if side == "registry" else base).append(took)
            (reads if side == "registry" else base_reads).append((rchar() - before) / size)
        shutil.rmtree(fresh)
    r = pair_ratio(ours, base)
    print(
        f"  S3 push (moto on 127.0.0.1): registry {median(ours):.2f} s vs boto3 upload_file with the same "
        f"TransferConfig {median(base):.2f} s -> {r:.2f}x the time; rchar {median(reads):.2f}x the data vs "
        f"{median(base_reads):.2f}x for boto3 alone"
    )


if __name__ == "__main__":
    sys.exit(main())
