"""Keyword arguments of ``toolchain.bench.options.BenchOptions`` as the CLI passes them, for tests to override."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def bench_args(**over: Any) -> dict[str, Any]:
    """Every ``BenchOptions`` field at the CLI's defaults (4 requests, no spec, Triton gRPC), updated by ``over``."""
    args: dict[str, Any] = dict(
        url="127.0.0.1:1",
        protocol="triton",
        model="ensemble",
        concurrency=None,
        rate=None,
        poisson=False,
        requests=4,
        duration=None,
        warmup=0,
        input_tokens=None,
        output_tokens=None,
        shared=None,
        dataset_path=None,
        tokenizer=None,
        repo=None,
        spec=None,
        cell_id=None,
        metrics_url=None,
        stream=True,
        seed=0,
        stop_on_error=False,
        timeout=10.0,
    )
    args.update(over)
    return args


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
