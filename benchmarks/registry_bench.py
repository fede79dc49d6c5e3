#!/usr/bin/env python
"""Registry benchmarks, each measured side by side in one run (medians of --runs):

1. local restore (`Registry.get`, reflink/hardlink) vs `cp -r` of the same engine directory;
2. hashing throughput: blake3 and hashlib sha256 (what the registry uses) vs `sha256sum`;
3. S3 get (parallel, multipart) vs `aws s3 cp --recursive` against the same moto server on 127.0.0.1
   (skipped with a note when the aws CLI is absent).

Usage: .venv/bin/python benchmarks/registry_bench.py [--size-gb 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_engine(d: Path, size: int) -> None:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {}}')
    chunk = os.urandom(64 * 2**20)
    for rank in range(2):
        with open(d / f"rank{rank}.engine", "wb") as f:
            left = size // 2
            while left > 0:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("TOOLCHAIN_CACHE", tempfile.mkdtemp(prefix="bench-cache-"))
    from toolchain.digest import hash_file
    from toolchain.registry import open_registry

    work = Path(tempfile.mkdtemp(prefix="regbench-", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        src = work / "engine"
        make_engine(src, int(args.size_gb * 1e9))
        reg = open_registry(str(work / "reg"))
        key = "e" * 64
        put_s = timed(lambda: reg.put(key, src))
        print(f"put {args.size_gb:g} GB: {put_s:.2f} s (hash + copy into the store, once)")

        ours, cp = [], []
        for i in range(args.runs):
            ours.append(timed(lambda i=i: reg.get(key, work / f"get{i}")))
            cp.append(timed(lambda i=i: subprocess.run(["cp", "-r", str(src), str(work / f"cp{i}")], check=True)))
            shutil.rmtree(work / f"get{i}")
            shutil.rmtree(work / f"cp{i}")
        mo, mc = statistics.median(ours), statistics.median(cp)
        print(
            f"local restore: registry get {mo:.3f} s vs cp -r {mc:.3f} s -> {mc / mo:.1f}x faster "
            f"({','.join(sorted(reg.backend.restore_methods))}; target 20x); the first get, which hashes every "
            f"blob before trusting the stat cache, took {ours[0]:.3f} s -> {mc / ours[0]:.1f}x"
        )

        big = src / "rank0.engine"
        gb = big.stat().st_size / 1e9
        b3, sh, ss = [], [], []
        for _ in range(args.runs):
            b3.append(timed(lambda: hash_file(big, "blake3")))
            sh.append(timed(lambda: hash_file(big, "sha256")))
            ss.append(timed(lambda: subprocess.run(["sha256sum", str(big)], check=True, capture_output=True)))
        mb3, msh, mss = (statistics.median(x) for x in (b3, sh, ss))
        print(
            f"hashing {gb:.2f} GB: blake3 {gb / mb3:.2f} GB/s, sha256 (hashlib) {gb / msh:.2f} GB/s, "
            f"sha256sum {gb / mss:.2f} GB/s -> blake3/sha256sum {mss / mb3:.2f}x, "
            f"hashlib-sha256/sha256sum {mss / msh:.2f}x (target >= 0.9x)"
        )

        if shutil.which("aws") and subprocess.run(["aws", "--version"], capture_output=True).returncode == 0:
            s3_bench(src, work, args.runs)
        else:
            print("S3 get vs aws s3 cp: skipped (the aws CLI is not installed here)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def s3_bench(src: Path, work: Path, runs: int) -> None:
    import socket

    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
                "AWS_DEFAULT_REGION": "us-east-1",
                "TOOLCHAIN_S3_ENDPOINT_URL": url,
            }
        )
        time.sleep(2)
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket="bench")
        from toolchain.registry import open_registry

        reg = open_registry("s3://bench/reg")
        key = "f" * 64
        reg.put(key, src)
        ours, cli = [], []
        for i in range(runs):
            ours.append(timed(lambda i=i: reg.get(key, work / f"s3get{i}")))
            cli.append(
                timed(
                    lambda i=i: subprocess.run(
                        [
                            "aws",
                            "--endpoint-url",
                            url,
                            "s3",
                            "cp",
                            "--recursive",
                            "--quiet",
                            "s3://bench/reg/blobs",
                            str(work / f"s3cp{i}"),
                        ],
                        check=True,
                    )
                )
            )
            shutil.rmtree(work / f"s3get{i}")
            shutil.rmtree(work / f"s3cp{i}")
        mo, mc = statistics.median(ours), statistics.median(cli)
        print(f"S3 get: registry {mo:.2f} s (verifies digests) vs aws s3 cp --recursive {mc:.2f} s -> {mc / mo:.2f}x")
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
