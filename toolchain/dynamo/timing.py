"""The Dynamo mocker's timing tables made from the planner's estimates.

``python -m dynamo.mocker --planner-profile-data FILE.npz`` interpolates prefill time over prompt length and
decode step time over (active KV tokens, context length) from five arrays (dynamo/mocker/args.py
``resolve_planner_profile_data`` and ``utils/planner_profiler_perf_data_converter.py`` in ai-dynamo 1.6.1):
``prefill_isl``, ``prefill_ttft_ms`` (1-D), ``decode_active_kv_tokens``, ``decode_context_length`` (1-D) and
``decode_itl`` (2-D, [kv, context]). The toolchain fills them from the pool's plan (toolchain.dynamo.plan):
prefill(n) = n × (prefill ms of the mean prompt ÷ its tokens); step = base + active KV tokens × slope, where the
roofline floor gives base = weights read ÷ HBM and slope = KV bytes per token per rank ÷ HBM, and the silicon
estimate gives the line through its decode step at batch 1 and at the pool's batch. ``--speedup-ratio`` then
scales every delay so a CPU run takes seconds.

The file is written without numpy (not a toolchain dependency): an .npz is a zip of .npy files, and an .npy
is a magic string, a header dict and the raw little-endian float64 values (numpy's ``format.py``, version 1.0).
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

GRID = 32


def npy_bytes(values: list[float], shape: tuple[int, ...]) -> bytes:
    """One float64 array in .npy format 1.0 (C order)."""
    n = 1
    for s in shape:
        n *= s
    if n != len(values):
        raise ValueError(f"{len(values)} values do not fill shape {shape}")
    dims = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(str(s) for s in shape) + ")"
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {dims}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    text = (header + " " * (pad % 64) + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + struct.pack(f"<{n}d", *values)


def write_npz(path: Path, arrays: dict[str, tuple[list[float], tuple[int, ...]]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, (values, shape) in arrays.items():
            z.writestr(f"{name}.npy", npy_bytes(values, shape))
    return path


@dataclass(frozen=True)
class WorkerTiming:
    """What the planner estimates for one worker: prefill per token and the decode step's two terms."""

    prefill_ms_per_token: float
    step_base_ms: float  # a decode step with no KV to read (the weights)
    step_ms_per_kv_token: float  # what each active KV token adds to the step
    max_input_len: int
    max_seq_len: int
    kv_tokens: int  # the worker's KV budget

    def prefill_ms(self, tokens: float) -> float:
        return self.prefill_ms_per_token * tokens

    def step_ms(self, active_kv_tokens: float) -> float:
        return self.step_base_ms + active_kv_tokens * self.step_ms_per_kv_token


def _grid(lo: float, hi: float, n: int = GRID) -> list[float]:
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def write_profile(path: Path, t: WorkerTiming) -> Path:
    """The mocker-format .npz of ``t``; prefill over 1..max_input_len, decode over 0..KV budget tokens."""
    isl = _grid(1.0, float(max(2, t.max_input_len)))
    kv = _grid(0.0, float(max(1, t.kv_tokens)))
    ctx = _grid(1.0, float(max(2, t.max_seq_len)))
    itl = [t.step_ms(k) for k in kv for _c in ctx]
    return write_npz(
        path,
        {
            "prefill_isl": (isl, (len(isl),)),
            "prefill_ttft_ms": ([t.prefill_ms(n) for n in isl], (len(isl),)),
            "decode_active_kv_tokens": (kv, (len(kv),)),
            "decode_context_length": (ctx, (len(ctx),)),
            "decode_itl": (itl, (len(kv), len(ctx))),
        },
    )
