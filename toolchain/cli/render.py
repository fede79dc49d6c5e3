"""Output helpers: data on stdout, narration on stderr."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 180)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fmt_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


class Stages:
    """Progress narration on stderr: one timed line per stage."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            err.print(f"[dim][{time.monotonic() - self.t0:6.1f}s][/dim] {stage}", highlight=False)
