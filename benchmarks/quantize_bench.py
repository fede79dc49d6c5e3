#!/usr/bin/env python
"""`toolchain quantize` against a plain ModelOpt script doing the same calibration and the same two
exports (benchmarks/plain_modelopt_quantize.py), side by side in one run: peak RSS, wall and CPU time.

The model is a random Llama built locally the way the tiny test model is built (never downloaded):
about 160M parameters, 305 MiB in bf16, so that imports do not dominate. ``--quick`` uses the tiny
model and a short calibration (the test suite runs it so this script cannot rot).

Usage: .venv/bin/python benchmarks/quantize_bench.py [--quick] [--runs N] [--format fp8] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import REPO, Run, child_env, median, pair_ratio, run_measured, verdict

TARGET_RSS = 1.3
TARGET_TIME = 1.1


def sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="tiny model, short calibration (seconds, not minutes)")
    ap.add_argument("--runs", type=int, default=1, help="pairs to run (toolchain, plain, toolchain, ...)")
    ap.add_argument("--format", default="fp8", choices=("fp8", "int4_awq", "int8_sq"))
    ap.add_argument("--work", type=Path, default=None, help="where the model is built and kept (default: a temp dir)")
    args = ap.parse_args(argv)

    from toolchain.quantize.tiny import LLAMA_160M, TINY, make_tiny_checkpoint

    work = args.work or Path(tempfile.mkdtemp(prefix="qbench-"))
    keep = args.work is not None
    try:
        sizes, dtype, calib = (TINY, "float32", (8, 32, 4)) if args.quick else (LLAMA_160M, "bfloat16", (64, 256, 4))
        name = "tiny" if args.quick else "llama-160m"
        model = make_tiny_checkpoint(work / name, sizes=sizes, dtype=dtype)
        mib = sum(f.stat().st_size for f in model.glob("*.safetensors")) / 2**20
        samples, seq_len, batch = calib
        env = child_env(TOOLCHAIN_CACHE=str(work / "cache"), TOOLCHAIN_DEBUG="1")
        ours: list[Run] = []
        plain: list[Run] = []
        log = work / "bench.log"
        for i in range(args.runs):
            for side in ("toolchain", "plain"):
                out = work / f"{side}-{i}"
                shutil.rmtree(out, ignore_errors=True)
                if side == "toolchain":
                    cmd = [sys.executable, "-m", "toolchain.cli.main", "quantize", "--checkpoint", str(model)]
                    cmd += ["--weights", args.format, "--out", str(out), "--calib-samples", str(samples)]
                    cmd += ["--calib-seq-len", str(seq_len), "--calib-batch-size", str(batch)]
                else:
                    cmd = [sys.executable, str(REPO / "benchmarks" / "plain_modelopt_quantize.py"), str(model)]
                    cmd += [str(out), args.format, str(samples), str(seq_len), str(batch)]
                r = run_measured(cmd, env=env, log=log)
                if r.returncode != 0:
                    print(f"{side} run failed (exit {r.returncode}); its output is in {log}", file=sys.stderr)
                    keep = True
                    return 1
                (ours if side == "toolchain" else plain).append(r)
        same = all(
            sha(work / f"toolchain-0/{rel}") == sha(work / f"plain-0/{rel}")
            for rel in ("trtllm/rank0.safetensors", "hf/model.safetensors")
        )
        print(
            f"quantize {args.format}: {name} ({mib:.0f} MiB {dtype}), calibration {samples} x {seq_len} tokens, "
            f"{args.runs} pair(s); baseline: plain ModelOpt script, same calibration, same two exports"
        )
        rss = pair_ratio([r.peak_rss_mb for r in ours], [r.peak_rss_mb for r in plain])
        wall = pair_ratio([r.wall_s for r in ours], [r.wall_s for r in plain])
        cpu = pair_ratio([r.cpu_s for r in ours], [r.cpu_s for r in plain])
        print(
            f"  peak RSS: toolchain {median([r.peak_rss_mb for r in ours]):.0f} MB vs plain "
            f"{median([r.peak_rss_mb for r in plain]):.0f} MB -> {rss:.2f}x ({verdict(rss, TARGET_RSS)})"
        )
        print(
            f"  wall:     toolchain {median([r.wall_s for r in ours]):.1f} s vs plain "
            f"{median([r.wall_s for r in plain]):.1f} s -> {wall:.2f}x ({verdict(wall, TARGET_TIME)})"
        )
        print(
            f"  CPU:      toolchain {median([r.cpu_s for r in ours]):.1f} s vs plain "
            f"{median([r.cpu_s for r in plain]):.1f} s -> {cpu:.2f}x (the toolchain also runs two accuracy checks)"
        )
        print(f"  exports byte-identical to the plain script's: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
