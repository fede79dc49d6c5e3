"""Figures in the unit their magnitude needs: one format of a size or a duration in every output (the CLI's
lines, the stages' summaries, the report's plots)."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ms(ms: float) -> str:
    """A duration given in milliseconds, in the unit its magnitude needs (0.004 ms is "4.0 µs", not "0.00 ms")."""
    if ms == 0:
        return "0 ms"
    if abs(ms) >= 1000:
        return f"{ms / 1000:.2f} s"
    if abs(ms) >= 0.1:
        return f"{ms:.2f} ms"
    if abs(ms) >= 1e-4:
        return f"{ms * 1000:.1f} µs"
    return f"{ms * 1e6:.1f} ns"
