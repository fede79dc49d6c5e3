"""SLO search: the highest load (concurrency or request rate) at which one instance still meets its SLOs.

A probe is one load point, sized to its load (``probe_size``): in concurrency mode at least
``STEADY_WAVES`` requests per stream, so that most of the probe runs with every stream busy (a budget of
64 requests at concurrency 256 would be one burst, never a steady state); in rate mode at least the
requests that arrive in ``RATE_WINDOW_S`` seconds at that rate (or in ``--duration``). Never fewer than
the ``--requests`` budget, never more than ``MAX_PROBE_REQUESTS``. The search grows the
load geometrically from ``start`` until a probe misses an SLO (or the bound ``limit`` is reached), then
bisects between the highest passing and the lowest failing load until they are within ``tolerance``
(concurrency: an absolute number of requests, default 1, so the knee is exact; rate: a fraction of the
passing rate, default 5 %). At most ``max_probes`` probes are measured.

A probe passes when P99 TTFT <= the TTFT SLO, P99 TPOT <= the TPOT SLO and the goodput fraction (requests
that completed within both per-request SLOs ÷ requests sent) >= the goodput target; an SLO not given is not
checked. The knee is the highest passing probe; its output-token throughput is the instance's measured
capacity at the SLO, which `toolchain plan --measured` sizes a fleet from.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from toolchain.artifacts.bench_result import (
    BenchResult,
    Knee,
    LoadPoint,
    Probe,
    ProbeVerdict,
    Search,
    SearchPlan,
    Summary,
)
from toolchain.bench.options import BenchOptions
from toolchain.bench.run import BenchWorkload, _result_document, measure_point
from toolchain.bench.slo import (
    DEFAULT_LIMIT as DEFAULT_LIMIT,
)
from toolchain.bench.slo import (
    DEFAULT_MAX_PROBES as DEFAULT_MAX_PROBES,
)
from toolchain.bench.slo import (
    DEFAULT_TOLERANCE as DEFAULT_TOLERANCE,
)
from toolchain.bench.slo import (
    MAX_PROBE_REQUESTS as MAX_PROBE_REQUESTS,
)
from toolchain.bench.slo import (
    MODES as MODES,
)
from toolchain.bench.slo import (
    RATE_WINDOW_S as RATE_WINDOW_S,
)
from toolchain.bench.slo import (
    STEADY_WAVES as STEADY_WAVES,
)
from toolchain.bench.slo import (
    SloTargets as SloTargets,
)
from toolchain.bench.slo import (
    check_slo_flags as check_slo_flags,
)
from toolchain.bench.slo import (
    make_plan as make_plan,
)
from toolchain.bench.slo import (
    make_targets as make_targets,
)
from toolchain.bench.slo import (
    probe_size as probe_size,
)
from toolchain.progress import Progress, silent


def verdict(summary: Summary, slo: SloTargets) -> tuple[bool, list[str], dict[str, Any]]:
    """Whether one probe met every SLO, why not (one reason per miss), and the figures it was judged on."""
    requests = summary.requests
    good_frac = (summary.goodput_rps * summary.wall_s / requests) if requests and summary.wall_s else 0.0
    figures = {
        "ttft_ms_p99": summary.ttft_ms.p99 if summary.ttft_ms is not None else None,
        "tpot_ms_p99": summary.tpot_ms.p99 if summary.tpot_ms is not None else None,
        "goodput_fraction": round(good_frac, 6),
        "completed": summary.completed,
        "requests": requests,
        "output_token_throughput_tps": summary.output_token_throughput_tps,
        "request_throughput_rps": summary.request_throughput_rps,
        "goodput_rps": summary.goodput_rps,
    }
    reasons = []
    if not summary.completed:
        reasons.append(f"all {requests} requests failed")
    for key, target, name in (("ttft_ms_p99", slo.ttft_ms, "TTFT"), ("tpot_ms_p99", slo.tpot_ms, "TPOT")):
        got = figures[key]
        if target is not None and got is not None and got > target:
            reasons.append(f"P99 {name} {got:.1f} ms > {target:g} ms")
    if slo.goodput is not None and good_frac < slo.goodput:
        reasons.append(f"goodput {good_frac:.1%} of requests < {slo.goodput:.0%}")
    return not reasons, reasons, figures


def run_search(
    opts: BenchOptions, work: BenchWorkload, plan: SearchPlan, slo: SloTargets, progress: Progress = silent
) -> BenchResult:
    """Grow, then bisect, to the knee; every probe is a load point of the result, the search its own section.
    ``opts`` say how to send each probe (its load is the plan's), ``work`` what to send."""
    work = replace(work, slo=slo.per_request())
    runs: list[LoadPoint] = []
    probes: list[Probe] = []
    interrupted = stop = None
    lo: float | None = None  # highest load that met the SLOs
    hi: float | None = None  # lowest load that missed one
    x = plan.start
    budget = max(1, len(work.requests) - opts.warmup)  # --requests
    status = "probe-limit"
    while len(probes) < plan.max_probes:
        phase = "grow" if hi is None else "bisect"
        n, sizing = probe_size(plan, x, budget)
        progress(
            f"SLO search ({plan.mode}), probe {len(probes) + 1}: {plan.load(x).label()} [{phase}], "
            f"{n} requests: {sizing}"
        )
        probe = replace(work, requests=work.requests_for(opts.warmup, n))
        run, interrupted, stop = measure_point(opts, probe, plan.load(x), progress, first=not runs)
        if run is None:  # the server was gone before this probe
            status = "server-gone"
            break
        runs.append(run)
        passed, reasons, figures = verdict(run.summary, slo)
        if not run.summary.completed:  # why they failed, in the server's words (the first one)
            why = next((r.error for r in run.records if r.error and not r.warmup), None)
            reasons = [f"{reason}: {why[:200]}" if reason.startswith("all ") and why else reason for reason in reasons]
        if stop is not None:  # the probe itself was cut short: its figures are partial, not a verdict
            passed, reasons = False, [f"probe cut short: {interrupted}"]
        probes.append(
            Probe.model_validate(
                {
                    "load": x,
                    "label": run.label,
                    "phase": phase,
                    "passed": passed,
                    "reasons": reasons,
                    **figures,
                    "sizing": f"{n} requests: {sizing}",
                }
            )
        )
        run.slo_probe = ProbeVerdict(passed=passed, reasons=reasons)
        if stop is not None:
            status = stop if stop in ("interrupted", "server-gone") else "stopped"  # stopped: --stop-on-error
            break
        if passed:
            lo = x
        else:
            hi = x
        if lo is None:  # the lowest load already misses
            status = "unmet"
            break
        if hi is None:
            if x >= plan.limit:
                status = "bound"
                break
            x = min(x * 2, plan.limit)
            continue
        if plan.close_enough(lo, hi):
            status = "found"
            break
        mid = plan.between(lo, hi)
        if mid <= lo or mid >= hi:
            status = "found"
            break
        x = mid
    search = _section(plan, slo, probes, lo, hi, status)
    return _result_document(opts, work, runs, interrupted, stop, search)


def _section(
    plan: SearchPlan,
    slo: SloTargets,
    probes: list[Probe],
    lo: float | None,
    hi: float | None,
    status: str,
) -> Search:
    """The search section of the result: plan, SLOs, every probe in order, the curve by load, and the knee."""
    knee = None
    if lo is not None:
        best = next(p for p in probes if p.load == lo and p.passed)
        knee = Knee.model_validate(best.model_dump() | {"first_failing_load": hi})
    return Search.model_validate(
        {
            "mode": plan.mode,
            "plan": plan.model_dump(),
            "slo": asdict(slo),
            "slo_text": slo.describe(),
            "status": status,
            "message": _message(plan, slo, probes, knee, hi, status),
            "probes": probes,
            "curve": sorted(probes, key=lambda p: p.load),
            "knee": knee,
        }
    )


def _fmt(mode: str, x: float | None) -> str:
    if x is None:
        return "-"
    return f"concurrency {x:g}" if mode == "concurrency" else f"{x:g} req/s"


def _message(
    plan: SearchPlan,
    slo: SloTargets,
    probes: list[Probe],
    knee: Knee | None,
    hi: float | None,
    status: str,
) -> str:
    """One sentence on how the search ended, with the figures it ended on."""
    if status == "unmet" and probes:
        p = probes[0]
        return (
            f"the SLOs ({slo.describe()}) are not met even at the lowest load, {_fmt(plan.mode, p.load)}: "
            f"{'; '.join(p.reasons)} (P99 TTFT {_n(p.ttft_ms_p99)} ms, P99 TPOT {_n(p.tpot_ms_p99)} ms, "
            f"goodput {p.goodput_fraction or 0:.1%}, {p.completed}/{p.requests} completed)"
        )
    if knee is None:
        return f"the search ended ({status}) before any probe met the SLOs"
    cap = f"{knee.output_token_throughput_tps or 0:.1f} output tok/s, {knee.request_throughput_rps or 0:.2f} req/s"
    if status == "found":
        return f"knee at {_fmt(plan.mode, knee.load)} ({cap}); {_fmt(plan.mode, hi)} misses the SLOs"
    if status == "bound":
        return (
            f"no knee within the bounds: the SLOs still hold at the search bound {_fmt(plan.mode, knee.load)} "
            f"({cap}); the knee is higher: raise --slo-max"
        )
    if status == "probe-limit":
        return (
            f"stopped after {len(probes)} probes with the knee between {_fmt(plan.mode, knee.load)} ({cap}) "
            f"and {_fmt(plan.mode, hi)}; raise --slo-max-probes or --slo-tolerance"
        )
    best = _fmt(plan.mode, knee.load)
    return f"the search ended early ({status}); the highest load measured to meet the SLOs: {best}"


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def assess_search(result: BenchResult) -> tuple[int, str | None]:
    """Exit code of a search: 130 Ctrl-C, 1 when the server failed or the lowest load misses the SLOs, else 0."""
    search = result.search
    assert search is not None, "assess_search judges an SLO search's result"
    if result.stop == "interrupted":
        return 130, "interrupted by Ctrl-C"
    if result.stop is not None or search.status == "server-gone":
        return 1, f"{result.interrupted} (the search stopped; the partial curve is kept)"
    if search.status == "unmet":
        return 1, str(search.message)
    return 0, None
