"""The SLO search's plan and targets, checked when the options are made (``toolchain.bench.options``) and used
by the search itself (``toolchain.bench.search``, whose docstring says how a search probes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toolchain.artifacts.bench_result import SearchPlan
from toolchain.errors import UserInputError

MODES = ("concurrency", "rate")
DEFAULT_LIMIT = {"concurrency": 1024.0, "rate": 10000.0}
DEFAULT_TOLERANCE = {"concurrency": 1.0, "rate": 0.05}
DEFAULT_MAX_PROBES = 16
STEADY_WAVES = 4  # concurrency mode: each stream sends at least this many requests
RATE_WINDOW_S = 4.0  # rate mode: at least the requests that arrive in this many seconds (or in --duration)
MAX_PROBE_REQUESTS = 4096  # the bound on one probe (4 waves at the default --slo-max 1024)


@dataclass(frozen=True)
class SloTargets:
    """What a probe must meet: P99 TTFT and P99 TPOT in ms, and the fraction of requests within both."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput: float | None = None

    def per_request(self) -> dict[str, float | None]:
        """The per-request SLO the goodput counts against (metrics.meets)."""
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms}

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"P99 TTFT <= {self.ttft_ms:g} ms")
        if self.tpot_ms is not None:
            parts.append(f"P99 TPOT <= {self.tpot_ms:g} ms")
        if self.goodput is not None:
            parts.append(f"goodput >= {self.goodput:.0%} of requests")
        return ", ".join(parts)


def probe_size(plan: SearchPlan, x: float, budget: int) -> tuple[int, str]:
    """How many requests the probe at load ``x`` sends, and why: enough for a steady state at that load
    (module docstring), never fewer than ``budget`` (--requests), never more than MAX_PROBE_REQUESTS."""
    if plan.mode == "concurrency":
        need = STEADY_WAVES * int(x)
        rule = f"{STEADY_WAVES} per stream × {int(x)} stream{'' if int(x) == 1 else 's'}"
    else:
        window = plan.duration_s or RATE_WINDOW_S
        need = math.ceil(x * window)
        rule = f"{x:g} req/s × {window:g} s"
    if need <= budget:
        return budget, f"--requests {budget} (≥ {rule})"
    if need > MAX_PROBE_REQUESTS:
        return MAX_PROBE_REQUESTS, f"{rule}, capped at {MAX_PROBE_REQUESTS}"
    return need, f"{rule} (above --requests {budget})"


def _positive(name: str, value: float | None, *, integer: bool = False) -> None:
    if value is None:
        return
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise UserInputError(f"{name} must be a positive number, not {value}")
    if integer and value != int(value):
        raise UserInputError(f"{name} must be a whole number of requests in concurrency mode, not {value}")


def make_plan(
    mode: str,
    *,
    start: float | None = None,
    limit: float | None = None,
    tolerance: float | None = None,
    max_probes: int | None = None,
    poisson: bool = False,
    duration_s: float | None = None,
) -> SearchPlan:
    """Validate the search flags (each mistake a one-line UserInputError) and fill in the defaults."""
    if mode not in MODES:
        raise UserInputError(f"--slo-search takes concurrency or rate, not {mode!r}", "e.g. --slo-search concurrency")
    integer = mode == "concurrency"
    _positive("--slo-start", start, integer=integer)
    _positive("--slo-max", limit, integer=integer)
    _positive("--slo-tolerance", tolerance)
    lo = float(start if start is not None else 1.0)
    hi = float(limit if limit is not None else DEFAULT_LIMIT[mode])
    if hi < lo:
        raise UserInputError(f"--slo-max {hi:g} is below --slo-start {lo:g}", "the search runs from start up to max")
    tol = float(tolerance if tolerance is not None else DEFAULT_TOLERANCE[mode])
    if mode == "rate" and tol >= 1:
        raise UserInputError(
            f"--slo-tolerance for a rate search is a fraction of the rate (e.g. 0.05), not {tol:g}",
            "pass a number between 0 and 1",
        )
    probes = DEFAULT_MAX_PROBES if max_probes is None else max_probes
    if probes < 2:
        raise UserInputError(f"--slo-max-probes must be at least 2, not {probes}", "e.g. --slo-max-probes 12")
    return SearchPlan(
        mode=mode, start=lo, limit=hi, tolerance=tol, max_probes=probes, poisson=poisson, duration_s=duration_s
    )


def check_slo_flags(ttft_ms: float | None, tpot_ms: float | None, goodput: float | None) -> None:
    """Each SLO flag's value, checked before anything slow runs."""
    _positive("--slo-ttft-ms", ttft_ms)
    _positive("--slo-tpot-ms", tpot_ms)
    if goodput is not None and not (math.isfinite(goodput) and 0 < goodput <= 1):
        raise UserInputError(f"--slo-goodput is a fraction of requests in (0, 1], not {goodput}", "e.g. 0.95")


def make_targets(
    spec_slo: dict[str, float | None], ttft_ms: float | None, tpot_ms: float | None, goodput: float | None
) -> SloTargets:
    """The search's SLOs: the flags, else the spec's (P99, or P50 when the spec gives only that)."""
    check_slo_flags(ttft_ms, tpot_ms, goodput)
    t = SloTargets(
        ttft_ms if ttft_ms is not None else spec_slo.get("ttft_ms"),
        tpot_ms if tpot_ms is not None else spec_slo.get("tpot_ms"),
        goodput,
    )
    if t.ttft_ms is None and t.tpot_ms is None and t.goodput is None:
        raise UserInputError(
            "the SLO search has no SLO to search against",
            "pass --spec SPEC (its slo section) or --slo-ttft-ms / --slo-tpot-ms / --slo-goodput",
        )
    return t
