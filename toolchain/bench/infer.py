"""Send one prompt to a served model and stream the answer (``toolchain infer``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from toolchain.bench.loadgen import make_target
from toolchain.bench.metrics import RequestRecord
from toolchain.bench.workload import Request
from toolchain.errors import BenchError


@dataclass
class InferResult:
    text: str
    ttft_ms: float | None
    e2e_ms: float | None
    output_tokens: int | None
    token_source: str
    stand_in: str | None = None  # what served the answer when it was not TensorRT-LLM (the CPU reference model)


def infer(
    protocol: str,
    url: str,
    model: str,
    prompt: str,
    *,
    max_tokens: int = 64,
    stream: bool = True,
    timeout: float = 120.0,
    on_text: Callable[[str], None] = lambda s: None,
) -> InferResult:
    """One request through the same client `bench` uses; ``on_text`` gets each piece as it arrives."""
    if max_tokens < 1:
        raise BenchError("--max-tokens must be at least 1", "e.g. --max-tokens 64")
    pieces: list[str] = []

    def seen(piece: str) -> None:
        pieces.append(piece)
        on_text(piece)

    stand_in: list[str | None] = [None]

    async def main() -> RequestRecord:
        target = make_target(protocol, url, model, stream=stream, timeout=timeout)
        target.on_text = seen
        rec = RequestRecord(0, 0, max_tokens, 0.0)
        try:
            await target.check()
            stand_in[0] = target.stand_in
            await target.one(Request(prompt, 0, max_tokens), rec)
        finally:
            with contextlib.suppress(Exception):
                await target.close()
        return rec

    rec = asyncio.run(main())
    if rec.error:
        raise BenchError(f"the request failed ({rec.error_kind or 'server'}): {rec.error[:300]}")
    return InferResult(
        "".join(pieces),
        None if rec.ttft is None else rec.ttft * 1000,
        None if rec.e2e is None else rec.e2e * 1000,
        rec.output_tokens,
        rec.token_source,
        stand_in[0],
    )
