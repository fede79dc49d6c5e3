"""Side-by-side measurement helpers for the benchmark scripts (no third-party code).

A child process is timed from outside with ``os.wait4``: wall time, user+system CPU and the
kernel's peak resident set size of that one process. Pairs run A, B, A, B, ... so drift on a
shared machine hits both sides; figures are medians and ratios are taken pair by pair.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int


def run_measured(cmd: Sequence[str], *, env: dict[str, str] | None = None, log: Path | None = None) -> Run:
    """Run ``cmd`` to completion and return its wall time, CPU time and peak RSS (this process alone)."""
    sink = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        t = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=env, stdout=sink, stderr=sink, cwd=REPO)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if log is not None and not isinstance(sink, int):
            sink.close()
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, proc.returncode)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def pair_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the pair-by-pair ratios a[i] / b[i]."""
    return median([x / y for x, y in zip(a, b, strict=True)])


def verdict(ratio: float, target: float, *, higher_is_better: bool = False) -> str:
    ok = ratio >= target if higher_is_better else ratio <= target
    return f"{'meets' if ok else 'MISSES'} target {'>=' if higher_is_better else '<='} {target:g}x"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env
