#!/usr/bin/env python
"""Time `toolchain --help` (target < 0.5 s) side by side with a bare `python -c pass`, medians of N runs.

Usage: .venv/bin/python benchmarks/cli_help_bench.py [--quick] [--runs 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="two runs")
    args = ap.parse_args()
    n = 2 if args.quick else args.runs
    exe = shutil.which("toolchain") or str(Path(sys.executable).parent / "toolchain")
    run([exe, "--help"])  # warm the page cache
    helps, bare = [], []
    for _ in range(n):
        helps.append(run([exe, "--help"]))
        bare.append(run([sys.executable, "-c", "pass"]))
    h, b = statistics.median(helps), statistics.median(bare)
    print(
        f"toolchain --help: median {h * 1000:.0f} ms (min {min(helps) * 1000:.0f}, max {max(helps) * 1000:.0f}); "
        f"python -c pass: {b * 1000:.0f} ms; ratio {h / b:.1f}x; target < 500 ms: {'met' if h < 0.5 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
