"""Shared pieces of the fuzz suite: a bounded CLI call, hostile values, and the run tally.

Every call goes through the real Typer app (``CliRunner``) with a wall-clock alarm, so a hang
is counted (and stopped) instead of blocking the run. ``TOOLCHAIN_FUZZ_SECONDS`` scales the time
budget of each fuzz test (default: a few seconds, so CI stays short).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from typer.testing import CliRunner

# The exit codes docs/cli.md documents: 0 ok, 1 failure, 2 user mistake, 3 missing extra, 4 GPU needed,
# 5 accuracy gate, 75 transient (nothing answered at an address the input named); 130 is Ctrl-C.
DOCUMENTED_EXIT_CODES = {0, 1, 2, 3, 4, 5, 75}


def budget(default: float) -> float:
    return float(os.environ.get("TOOLCHAIN_FUZZ_SECONDS", default))


def hang_limit(default: float) -> float:
    """Seconds after which one CLI call counts as a hang and is stopped."""
    return float(os.environ.get("TOOLCHAIN_FUZZ_HANG_SECONDS", default))


class Hang(BaseException):
    """Raised by the alarm inside a CLI call that ran past its limit."""


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def fire(*_: Any) -> None:
        raise Hang

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    args: list[str]
    exit_code: int | None
    seconds: float
    stderr: str
    traceback: str | None = None
    hang: bool = False
    stdout: str = ""


@dataclass
class Tally:
    """What a fuzz test saw; ``problems`` are the runs that broke a property."""

    runs: int = 0
    tracebacks: int = 0
    hangs: int = 0
    bad_exit: int = 0
    slow: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return (
            f"{name}: {self.runs} runs, {self.tracebacks} tracebacks, {self.hangs} hangs, "
            f"{self.slow} slow, {self.bad_exit} undocumented exit codes"
        )


def invoke(args: list[str], limit: float) -> Outcome:
    """Run ``toolchain ARGS`` in-process; a traceback is any exception other than a clean exit."""
    from toolchain.cli.main import app

    runner = CliRunner()
    t0 = time.monotonic()
    try:
        with alarm(limit):
            res = runner.invoke(app, args, catch_exceptions=True)
    except Hang:
        return Outcome(args, None, time.monotonic() - t0, "", hang=True)
    dt = time.monotonic() - t0
    stderr = res.stderr if res.stderr_bytes is not None else ""
    tb = None
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        exc = res.exception
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Outcome(args, res.exit_code, dt, stderr, tb, stdout=res.stdout)


def wants_json(args: list[str]) -> bool:
    """Whether a command line asks for JSON on stdout."""
    return "--json" in args or any(a == "--format" and b == "json" for a, b in itertools.pairwise(args))


def check(tally: Tally, o: Outcome, *, slow_s: float) -> None:
    """Count one outcome against the properties: no traceback, no hang, documented exit code,
    a one-line error, and an answer within ``slow_s``."""
    tally.runs += 1
    short = " ".join(a if len(a) < 60 else a[:57] + "..." for a in o.args)
    if o.hang:
        tally.hangs += 1
        tally.problems.append(f"hang: {short!r}")
        return
    if o.traceback is not None:
        tally.tracebacks += 1
        tally.problems.append(f"traceback: {short!r}\n{o.traceback.strip().splitlines()[-1]}")
        return
    if o.exit_code not in DOCUMENTED_EXIT_CODES:
        tally.bad_exit += 1
        tally.problems.append(f"exit {o.exit_code}: {short!r}")
    if o.seconds > slow_s:
        tally.slow += 1
        tally.problems.append(f"slow ({o.seconds:.1f} s): {short!r}")
    if o.exit_code not in (0, None) and wants_json(o.args):
        # one JSON document on stdout, errors included (before: nothing, so a script read an empty string)
        try:
            json.loads(o.stdout)
        except ValueError:
            tally.problems.append(f"no JSON document on stdout (exit {o.exit_code}): {short!r}: {o.stdout[-200:]!r}")
    if o.exit_code not in (0, None):
        errors = [ln for ln in o.stderr.splitlines() if ln.startswith("Error: ")]
        if "Usage:" in o.stderr:  # click's usage block: a usage error is one line like every other mistake
            tally.problems.append(f"usage block, not one line (exit {o.exit_code}): {short!r}: {o.stderr[-300:]!r}")
        if len(errors) < 1 or any("Traceback" in ln for ln in o.stderr.splitlines()):
            tally.problems.append(f"no one-line error (exit {o.exit_code}): {short!r}: {o.stderr[-300:]!r}")


# A valid spec every fuzz case starts from (catalog architecture: no checkpoint, no network).
BASE: dict[str, Any] = {
    "name": "fuzz",
    "model": {"source": "hf://org/model@main", "architecture": "llama-3.1-8b"},
    "quantization": {"weights": "fp8", "kv_cache": "fp8"},
    "target": {
        "trtllm_version": "1.1.0",
        "tensorrt_version": "10.13.3",
        "container": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
    },
    "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [8], "max_seq_len": [4096], "max_input_len": [2048]},
    "build": {"max_num_tokens": 8192},
    "serving": {"cuda_graphs": {"batch_sizes": [1, 2, 4, 8]}},
    "slo": {"tpot_ms": {"p99": 500}},
    "traffic": {"peak_rps": 10, "input_tokens": {"mean": 512}, "output_tokens": {"mean": 128}},
}

# A 1 KB YAML 'billion laughs': each anchor holds nine aliases of the one before.
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)
