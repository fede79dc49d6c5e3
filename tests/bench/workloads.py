"""Keyword arguments of ``toolchain.bench.options.BenchOptions`` for tests, and the bench command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def bench_args(**over: Any) -> dict[str, Any]:
    """A quick load test's options (4 requests, no warm-up, a 10 s deadline, Triton gRPC at an unused port), the
    model's defaults for the rest, updated by ``over``."""
    return {"url": "127.0.0.1:1", "requests": 4, "warmup": 0, "timeout": 10.0, **over}


def bench_cmd(url: str, tok: Path, out: Path, *extra: str) -> list[str]:
    """``toolchain bench`` as a subprocess against an OpenAI-protocol test server (model "m"), saving to ``out``."""
    return [
        sys.executable,
        "-m",
        "toolchain.cli.main",
        "bench",
        "--url",
        url,
        "--protocol",
        "openai",
        "--model",
        "m",
        "--tokenizer",
        str(tok),
        "--input-tokens",
        "4",
        "--output-tokens",
        "6",
        "--warmup",
        "0",
        "--save",
        str(out),
        *extra,
    ]
