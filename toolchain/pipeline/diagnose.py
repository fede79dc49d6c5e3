"""`toolchain diagnose`: the server metrics a benchmark recorded (or a live sample of them) through the rules."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.artifacts.bench_result import read_result
from toolchain.bench import prom
from toolchain.diagnose.rules import Finding, bench_window, observations_from
from toolchain.diagnose.rules import diagnose as run_rules
from toolchain.errors import UserInputError


@dataclass
class Diagnosis:
    findings: list[Finding]
    server: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)  # where the metrics came from, when it matters
    slo: dict[str, float] = field(default_factory=dict)  # the per-request SLOs the bench result measured against


def sample_server(metrics_url: str, model: str, samples: int) -> dict[str, Any]:
    """Server-side figures from ``samples`` scrapes of a live server, one second apart."""
    snaps = []
    for i in range(max(1, samples)):
        snaps.append(prom.scrape(metrics_url))
        if i + 1 < samples:
            time.sleep(1)
    return prom.server_side(snaps[0], snaps[-1], snaps, model)


def diagnose_deployment(
    *,
    metrics_url: str | None,
    bench: Path | None,
    model: str = "tensorrt_llm",
    samples: int = 3,
    prefix_caching: bool | None = None,
) -> Diagnosis:
    """Findings for a benchmark result and/or a live server; a result's own metric window wins."""
    if not metrics_url and not bench:
        raise UserInputError("give --metrics-url, --bench, or both")
    result = read_result(bench) if bench else None
    server = bench_window(result)
    notes = []
    if server is not None and metrics_url:
        notes.append(f"using the server metrics {bench} recorded during its run; {metrics_url} is not sampled now")
    elif metrics_url:
        if result is not None:
            notes.append(
                f"{bench} holds no server metrics (bench ran without --metrics-url): sampling the server now, "
                "which may be idle"
            )
        server = sample_server(metrics_url, model, samples)
    if prefix_caching is None and result is not None:
        prefix_caching = True if any(r.prefix is not None for r in result.runs) else None
    slo = result.runs[0].summary.slo if result is not None else {}
    measured = {k: float(v) for k, v in slo.items() if v is not None}
    return Diagnosis(run_rules(observations_from(result, server, prefix_caching)), server, notes, measured)
