"""Keyword arguments of ``toolchain.bench.setup.make_config`` as the CLI passes them, for tests to override."""

from __future__ import annotations

from typing import Any


def bench_args(**over: Any) -> dict[str, Any]:
    """Every ``make_config`` argument at the CLI's defaults (4 requests, no spec, Triton gRPC), updated by ``over``."""
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
