"""A synchronous one-request streaming helper over tritonclient (smoke checks and tests; the load
generator is toolchain.bench.loadgen)."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _inp(g: Any, name: str, arr: np.ndarray[Any, Any], dtype: str) -> Any:
    i = g.InferInput(name, list(arr.shape), dtype)
    i.set_data_from_numpy(arr)
    return i


def text_inputs(
    g: Any, prompt: str, max_tokens: int, *, stream: bool, perf: bool = True, llmapi: bool = False
) -> list[Any]:
    """The inputs of one request: the ensemble's and BLS's names, or the llmapi model's (unbatched, named
    after SamplingParams, no perf switch)."""
    if llmapi:
        return [
            _inp(g, "text_input", np.array([prompt], dtype=object), "BYTES"),
            _inp(g, "sampling_param_max_tokens", np.array([max_tokens], dtype=np.int32), "INT32"),
            _inp(g, "streaming", np.array([stream], dtype=bool), "BOOL"),
        ]
    return [
        _inp(g, "text_input", np.array([[prompt]], dtype=object), "BYTES"),
        _inp(g, "max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
        _inp(g, "stream", np.array([[stream]], dtype=bool), "BOOL"),
        _inp(g, "return_perf_metrics", np.array([[perf]], dtype=bool), "BOOL"),
    ]


@dataclass
class StreamResult:
    chunks: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # perf_counter of each non-empty response
    sent: float = 0.0
    perf: dict[str, int] = field(default_factory=dict)
    error: str | None = None


PERF_NAMES = ("kv_cache_reused_blocks", "kv_cache_alloc_total_blocks", "num_output_tokens", "num_input_tokens")


def stream_generate(
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    stream: bool = True,
    timeout: float = 120.0,
    llmapi: bool = False,
) -> StreamResult:
    """One request over a gRPC bidirectional stream; returns every chunk with its arrival time. ``llmapi``:
    the model is TensorRT-LLM's llmapi model (runtime pytorch), which has no perf outputs."""
    import tritonclient.grpc as g

    client = g.InferenceServerClient(url)
    q: queue.Queue[tuple[float, Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((time.perf_counter(), result, error)))
    res = StreamResult()
    try:
        names = ("text_output",) if llmapi else ("text_output", *PERF_NAMES)
        outputs = [g.InferRequestedOutput(n) for n in names]
        res.sent = time.perf_counter()
        inputs = text_inputs(g, prompt, max_tokens, stream=stream, llmapi=llmapi)
        client.async_stream_infer(model, inputs, outputs=outputs, enable_empty_final_response=True)
        deadline = time.monotonic() + timeout
        while True:
            ts, r, err = q.get(timeout=max(0.1, deadline - time.monotonic()))
            if err is not None:
                res.error = str(err)
                break
            text = r.as_numpy("text_output")
            if text is not None and text.size:
                res.chunks.append(
                    b"".join(x if isinstance(x, bytes) else str(x).encode() for x in text.reshape(-1)).decode(
                        "utf-8", "replace"
                    )
                )
                res.times.append(ts)
                for n in PERF_NAMES:
                    v = r.as_numpy(n)
                    if v is not None:
                        res.perf[n] = int(v.reshape(-1)[0])
            if r.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    return res
