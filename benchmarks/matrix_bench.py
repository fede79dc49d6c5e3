#!/usr/bin/env python
"""Matrices of thousands of cells, whole commands timed side by side in one run (medians of pairs):

1. `toolchain matrix SPEC --registry s3://...` against a moto server on 127.0.0.1 holding 10% of the
   engines vs the same command offline (no registry): existence comes from one listing, not a HEAD
   per cell (target <= 2x);
2. `toolchain spec expand SPEC` (table) vs `--json` (target: the table costs no more than 1.5x);
3. `toolchain build SPEC --all --dry-run` digests the local checkpoint once, whatever the cell count.

The spec is llama-3.1-8b-fp8.yaml with a generated matrix (2 GPUs x batch sizes x 10 lengths x 10
input lengths). ``--quick``: 400 cells, one pair.

Usage: .venv/bin/python benchmarks/matrix_bench.py [--quick] [--cells 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import child_env, median, pair_ratio, run_measured, verdict
from tests.generated import make_spec
from tests.servers import start_moto, stop

TARGET_S3 = 2.0
TARGET_TABLE = 1.5


def side_by_side(a: list[str], b: list[str], runs: int, env: dict[str, str], log: Path) -> tuple[float, float, float]:
    """Median wall of A, of B and the median pair ratio A/B; A and B alternate."""
    wa: list[float] = []
    wb: list[float] = []
    for _ in range(runs):
        for cmd, into in ((a, wa), (b, wb)):
            r = run_measured(cmd, env=env, log=log)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}; see {log}")
            into.append(r.wall_s)
    return median(wa), median(wb), pair_ratio(wa, wb)


def seed_registry(url: str, env: dict[str, str], spec: Path, every: int) -> int:
    """Store a manifest for every ``every``-th cell's engine key (entries, not engines: a listing
    reads names only)."""
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "TOOLCHAIN_"))})
    import boto3

    from toolchain.artifacts.cell import for_cells
    from toolchain.registry import open_registry
    from toolchain.registry.manifest import EntryManifest, FileEntry
    from toolchain.registry.store import manifest_path
    from toolchain.specs.loader import load_spec

    boto3.client("s3", endpoint_url=env["TOOLCHAIN_S3_ENDPOINT_URL"]).create_bucket(Bucket="bench")
    reg = open_registry(url)
    keys = [a.engine_key for a in for_cells(load_spec(spec)) if a.engine_key][::every]
    f = FileEntry(digest="blake3:" + "0" * 64, size=1)
    for k in keys:
        m = EntryManifest(key=k, files={"rank0.engine": f}, created="2026-01-01T00:00:00+00:00")
        reg.backend.write_bytes(manifest_path(k), m.model_dump_json().encode())
    return len(keys)


def build_dry_run(work: Path, cells: int) -> tuple[int, int, float]:
    """Run `build SPEC --all --dry-run` in this process on a spec whose checkpoint is local (the tiny
    model), counting how often the checkpoint directory is digested."""
    os.environ["TOOLCHAIN_CACHE"] = str(work / "cache")
    from typer.testing import CliRunner

    from toolchain.artifacts import keys
    from toolchain.cli.main import app
    from toolchain.quantize.tiny import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint(work / "tiny")
    spec = make_spec(work / "local.yaml", cells, source=str(ckpt))
    calls: list[Path] = []
    real = keys.dir_digest

    def counting(root: Path, **kw: Any) -> str:
        calls.append(root)
        return real(root, **kw)

    keys.dir_digest = counting
    try:
        t = time.perf_counter()
        r = CliRunner().invoke(
            app, ["build", str(spec), "--all", "--dry-run", "--registry", str(work / "reg"), "--json"]
        )
        took = time.perf_counter() - t
    finally:
        keys.dir_digest = real
    if r.exit_code != 0:
        raise RuntimeError(f"build --dry-run failed: {r.output[-2000:]}")
    import json

    planned = len(json.loads(r.stdout)["cells"])
    return sum(1 for c in calls if Path(c) == ckpt), planned, took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="400 cells, one pair")
    ap.add_argument("--cells", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    cells, runs = (400, 1) if args.quick else (args.cells, args.runs)
    work = Path(tempfile.mkdtemp(prefix="matrixbench-"))
    log = work / "bench.log"
    moto = None
    try:
        spec = make_spec(work / "spec.yaml", cells)
        tc = [sys.executable, "-m", "toolchain.cli.main"]
        env = child_env(TOOLCHAIN_CACHE=str(work / "cache"))

        t_table, t_json, r_table = side_by_side(
            [*tc, "spec", "expand", str(spec)], [*tc, "spec", "expand", str(spec), "--json"], runs, env, log
        )
        print(f"{cells} cells, {runs} pair(s), whole commands")
        print(
            f"  spec expand: table {t_table:.2f} s vs --json {t_json:.2f} s -> {r_table:.2f}x "
            f"({verdict(r_table, TARGET_TABLE)})"
        )

        moto, url = start_moto(work / "moto.log")
        env_s3 = dict(
            env,
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            TOOLCHAIN_S3_ENDPOINT_URL=url,
        )
        held = seed_registry("s3://bench/engines", env_s3, spec, 10)
        matrix = [*tc, "matrix", str(spec), "--format", "json"]
        t_s3, t_off, r_s3 = side_by_side(
            [*matrix, "--registry", "s3://bench/engines"], [*matrix, "--offline"], runs, env_s3, log
        )
        print(
            f"  matrix --registry s3:// (moto on 127.0.0.1, {held} of {cells} engines held): {t_s3:.2f} s "
            f"vs --offline {t_off:.2f} s -> {r_s3:.2f}x ({verdict(r_s3, TARGET_S3)})"
        )
        digests, cells_planned, t_build = build_dry_run(work, min(cells, 2000))
        print(
            f"  build --all --dry-run ({cells_planned} cells, local checkpoint): checkpoint digested {digests} "
            f"time(s) in {t_build:.2f} s (target: once)"
        )
        return 0
    finally:
        if moto is not None:
            stop(moto)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
