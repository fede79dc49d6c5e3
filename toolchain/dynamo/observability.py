"""Alerts, recording rules and a Grafana dashboard for a DynamoGraphDeployment, from NVIDIA Dynamo's own metrics.

`toolchain dynamo deploy` (and `toolchain deploy` on a Dynamo spec) writes them next to the DynamoGraphDeployment
with the deploy core's writers (``toolchain.deploy.observability``: the same SLO burn-rate alerts, rule-table alerts,
health alerts and dashboard layout as a Triton deployment), over Dynamo 1.6.1's series (docs/observability.md,
"NVIDIA Dynamo"; names from ``dynamo/prometheus_names.py``, recorded in tests/reference/metrics/dynamo_1.6.1.json):

- the frontend's ``dynamo_frontend_time_to_first_token_seconds`` and ``..._inter_token_latency_seconds`` histograms
  (TTFT and ITL quantiles; the TTFT SLO burn rates), ``..._requests_total{status}`` (request rate, error share),
  ``..._inflight_requests`` and ``..._queued_requests`` (saturation), and its router's per-worker
  ``..._worker_active_decode_blocks{worker_type}`` over ``..._model_total_kv_blocks`` (KV usage per pool: prefill
  and decode workers);
- each worker's ``dynamo_component_requests_total{dynamo_component}`` (requests per pool).

Series are scoped to ``namespace="<ns>"`` and ``dynamo_namespace="<ns>-<name>"``: the Dynamo namespace the operator
gives a DynamoGraphDeployment's pods (deploy/operator ``ComputeDynamoNamespace``), which its PodMonitors put on the
frontend's series (``dynamo-frontend``: relabelled from the pod label ``nvidia.com/dynamo-namespace``) and Dynamo's
runtime writes on the workers' own. The operator's Helm chart creates those PodMonitors (``dynamo-frontend``,
``dynamo-worker``), so no ServiceMonitor or PodMonitor is written here: a second one would scrape every pod twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain import yamlout
from toolchain.artifacts.rule_table import KV_CRITICAL, KV_FRACTION, RULES, WINDOW, Signal
from toolchain.deploy.observability import (
    LatencyHistogram,
    Row,
    RuleTable,
    Scope,
    Server,
    Slo,
    board,
    burn_rows,
    dashboard_configmap_object,
    prometheus_rule_object,
    rule_groups,
    slos_of,
)
from toolchain.dynamo.plan import DynamoPlan
from toolchain.specs.matrix import Cell

FRONTEND = "dynamo_frontend_"
# dynamo_frontend_time_to_first_token_seconds' finite bucket bounds (seconds), as Dynamo 1.6.1's frontend serves them
TTFT_BUCKETS_S = (0.0, 0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1, 2.2, 4.7, 10, 22, 48, 100, 220, 480)
SATURATION = 0.9  # in-flight requests at this share of the decode pools' batch slots: the pools are full

DYNAMO = Server(
    name="dynamo",
    ttft=LatencyHistogram(f"{FRONTEND}time_to_first_token_seconds", TTFT_BUCKETS_S, ms_per_unit=1000.0),
    ttft_missing="the Dynamo frontend exports dynamo_frontend_time_to_first_token_seconds once it serves the model; "
    "none means no frontend is scraped or the model never registered",
    ttft_missing_action="kubectl get pods -l nvidia.com/dynamo-component-type=frontend; check the operator's "
    "dynamo-frontend PodMonitor selects them (nvidia.com/metrics-enabled)",
    not_scraped="Prometheus has no healthy frontend target for this DynamoGraphDeployment: every alert of it is blind",
    not_scraped_action="kubectl get dgd and the frontend pods; the operator's dynamo-frontend PodMonitor scrapes the "
    "container port named http",
    burn_action="check the prefill pool (LLMKVCacheNearlyFull with worker_type=prefill) and the saturation alert "
    "(LLMDynamoSaturated); re-plan with `toolchain dynamo plan`",
    diagnose="toolchain diagnose --metrics-url http://<frontend>:8000/metrics,http://<worker>:9090/metrics",
)

_BY = "by (namespace, dynamo_namespace)"


def _quantiles(metric: str, hist: str, what: str) -> list[Signal]:
    return [
        Signal(
            f"toolchain:{metric}_ms:p{q}",
            f"1000 * histogram_quantile(0.{q}, sum by (namespace, dynamo_namespace, le) "
            f"(rate({FRONTEND}{hist}_bucket{{$MODEL}}[{WINDOW}])))",
            "ms",
            f"{what} P{q} (the Dynamo frontend's histogram)",
        )
        for q in ("50", "90", "99")
    ]


SIGNALS: tuple[Signal, ...] = (
    *_quantiles("ttft", "time_to_first_token_seconds", "time to first token"),
    *_quantiles("itl", "inter_token_latency_seconds", "inter-token latency"),
    Signal(
        "toolchain:requests:rate5m",
        f'sum {_BY} (rate({FRONTEND}requests_total{{$MODEL,status="success"}}[{WINDOW}]))',
        "1/s",
        "successful requests per second",
    ),
    Signal(
        "toolchain:errors:ratio_rate5m",
        f'sum {_BY} (rate({FRONTEND}requests_total{{$MODEL,status="error"}}[{WINDOW}])) / '
        f"sum {_BY} (rate({FRONTEND}requests_total{{$MODEL}}[{WINDOW}]))",
        "ratio",
        "failed share of requests",
    ),
    Signal(
        "toolchain:inflight:sum",
        f"sum {_BY} ({FRONTEND}inflight_requests{{$MODEL}})",
        "requests",
        "requests the frontend has in flight to the workers",
    ),
    Signal(
        "toolchain:queued:sum",
        f"sum {_BY} ({FRONTEND}queued_requests{{$MODEL}})",
        "requests",
        "requests waiting for their first token",
    ),
    Signal(
        "toolchain:kv_usage:max",
        f"max by (namespace, dynamo_namespace, worker_type) (max_over_time({FRONTEND}worker_active_decode_blocks"
        f"{{$SEL}}[{WINDOW}])) / on (namespace, dynamo_namespace) group_left() "
        f"max {_BY} ({FRONTEND}model_total_kv_blocks{{$MODEL}})",
        "ratio",
        "peak KV-cache block usage per pool (worker_type prefill | decode), worst worker, as the frontend's router "
        "tracks it",
    ),
)
KV_SIGNAL = "toolchain:kv_usage:max"


def table_of(cell: Cell) -> RuleTable:
    """The rule table over the signals this deployment exports: the frontend tracks each worker's KV blocks only
    when it routes by KV (``dynamo.router: kv``; measured on 1.6.1: round-robin serves no
    ``dynamo_frontend_worker_active_decode_blocks``), so without the KV router there is no KV signal, and the rule
    table's KV alert is left out rather than written to never fire."""
    d = cell.spec.dynamo
    kv = d is not None and d.router == "kv"
    return RuleTable(RULES, tuple(s for s in SIGNALS if kv or s.record != KV_SIGNAL))


def scope_of(name: str, namespace: str, served_model: str) -> Scope:
    """The series of one DynamoGraphDeployment: its namespace and the Dynamo namespace the operator gives it."""
    return Scope(name, namespace, served_model, app_label="dynamo_namespace", app_value=f"{namespace}-{name}")


def capacity(cell: Cell, plan: DynamoPlan) -> int:
    """The decode pools' batch slots: workers that decode times the batch each admits."""
    return sum(p.replicas for p in plan.pools if p.role in ("decode", "workers")) * cell.max_batch_size


def own_alerts(scope: Scope, slos: list[Slo], slots: int) -> list[dict[str, Any]]:
    """ITL against each TPOT target (the frontend's per-token histogram), and saturation of the decode slots."""
    out: list[dict[str, Any]] = []
    for slo in slos:
        if slo.metric != "tpot":
            continue
        out.append(
            {
                "alert": f"LLMITLP{slo.percentile}OverSLO",
                "expr": f"toolchain:itl_ms:p{slo.percentile}{{{scope.sel}}} > {slo.target_ms:g}",
                "for": "15m",
                "labels": {"severity": "warning", "slo": slo.name, "deployment": scope.app},
                "annotations": {
                    "summary": f"{scope.app}: inter-token latency P{slo.percentile} is over the TPOT target "
                    f"({slo.target_ms:g} ms)",
                    "description": '{{ $value | printf "%.1f" }} ms between tokens at P'
                    f"{slo.percentile} (the frontend's dynamo_frontend_inter_token_latency_seconds)",
                    "action": "check the decode pool's KV usage and batch against the plan (`toolchain dynamo plan "
                    "--explain`); add decode replicas",
                },
            }
        )
    out.append(
        {
            "alert": "LLMDynamoSaturated",
            "expr": f"toolchain:inflight:sum{{{scope.sel}}} >= {SATURATION * slots:g}",
            "for": "10m",
            "labels": {"severity": "warning", "deployment": scope.app},
            "annotations": {
                "summary": f"{scope.app}: in-flight requests at {SATURATION:.0%} or more of the decode pools' "
                f"{slots} batch slots",
                "description": "{{ $value }} requests in flight: new requests wait for a decode slot",
                "action": "add decode replicas (dynamo.decode.replicas) or lower admitted load; see `toolchain dynamo "
                "plan --explain`",
            },
        }
    )
    return out


def groups_of(cell: Cell, plan: DynamoPlan, scope: Scope) -> list[dict[str, Any]]:
    slos = slos_of(cell)
    extra = own_alerts(scope, slos, capacity(cell, plan))
    return rule_groups(table_of(cell), scope, slos, prefix_caching=False, server=DYNAMO, health=extra)


def dashboard(cell: Cell, plan: DynamoPlan, scope: Scope, *, title: str) -> dict[str, Any]:
    """TTFT and ITL quantiles against the SLOs, requests and errors, in-flight and queued against the decode slots,
    KV usage per pool, requests per pool, and the TTFT error-budget burn."""
    s, m = scope.sel, scope.model_sel
    slos = slos_of(cell)
    ttft = {x.percentile: x.target_ms for x in slos if x.metric == "ttft"}
    tpot = {x.percentile: x.target_ms for x in slos if x.metric == "tpot"}
    ttft_thr: list[tuple[str, float | None]] = [("green", None)] + ([("red", ttft[max(ttft)])] if ttft else [])
    itl_thr: list[tuple[str, float | None]] = [("green", None)]
    decode = [p for p in plan.pools if p.role in ("decode", "workers")]
    if decode and decode[0].step_ms:
        itl_thr = [("blue", None), ("green", round(decode[0].step_ms, 3))]  # the planned decode step
    if tpot:
        itl_thr.append(("red", tpot[min(tpot)]))
    slots = capacity(cell, plan)
    kv_panel: list[Row] = [
        (
            "KV cache per pool",
            [(f"{KV_SIGNAL}{{{s}}}", "{{worker_type}}")],
            "percentunit",
            [("green", None), ("orange", KV_FRACTION), ("red", KV_CRITICAL)],
            "Peak share of KV blocks in use on the worst worker of each pool (prefill, decode), from the router.",
        )
    ]
    if KV_SIGNAL not in {x.record for x in table_of(cell).signals}:
        kv_panel = []  # no KV router: the frontend tracks no worker's blocks
    rows: list[Row] = [
        (
            "TTFT (frontend)",
            [(f"toolchain:ttft_ms:p{q}{{{s}}}", f"P{q}") for q in (50, 90, 99)],
            "ms",
            ttft_thr,
            "Time to first token at the Dynamo frontend; the red line is the spec's TTFT target.",
        ),
        (
            "Inter-token latency (frontend)",
            [(f"toolchain:itl_ms:p{q}{{{s}}}", f"P{q}") for q in (50, 90, 99)],
            "ms",
            itl_thr,
            "Time between tokens; green line: the plan's decode step, red: the TPOT target.",
        ),
        (
            "Requests",
            [
                (f"toolchain:requests:rate5m{{{s}}}", "succeeded/s"),
                (f'sum by (error_type) (rate({FRONTEND}requests_total{{{m},status="error"}}[5m]))', "{{error_type}}"),
            ],
            "reqps",
            None,
            "Successful requests per second, and failed ones by error type (LLMRequestErrors above 1%).",
        ),
        (
            "In flight and queued",
            [(f"toolchain:inflight:sum{{{s}}}", "in flight"), (f"toolchain:queued:sum{{{s}}}", "before first token")],
            "short",
            [("green", None), ("red", SATURATION * slots)],
            f"The red line is {SATURATION:.0%} of the decode pools' {slots} batch slots (LLMDynamoSaturated).",
        ),
        *kv_panel,
        (
            "Worker requests per pool",
            [
                (
                    f"sum by (dynamo_component) (rate(dynamo_component_requests_total"
                    f'{{{s},dynamo_endpoint="generate"}}[5m]))',
                    "{{dynamo_component}}",
                )
            ],
            "reqps",
            None,
            "Requests each pool's workers served per second (prefill; backend = decode).",
        ),
        *burn_rows(scope, slos),
    ]
    return board(scope, rows, title=title, server=DYNAMO)


@dataclass(frozen=True)
class Observability:
    rule_file: dict[str, Any]
    prometheus_rule: dict[str, Any]
    dashboard: dict[str, Any]
    configmap: dict[str, Any]


def build(cell: Cell, plan: DynamoPlan, *, name: str, namespace: str, labels: dict[str, str]) -> Observability:
    scope = scope_of(name, namespace, cell.spec.name)
    groups = groups_of(cell, plan, scope)
    grafana = dashboard(cell, plan, scope, title=f"{cell.spec.name} {cell.id} (Dynamo {name})")
    return Observability(
        {"groups": groups},
        prometheus_rule_object(name, labels, groups, namespace),
        grafana,
        dashboard_configmap_object(name, labels, grafana, namespace),
    )


def write(out: Path, obs: Observability) -> dict[str, Path]:
    """The plain rule file and dashboard JSON under ``out/observability`` (the manifests are the caller's)."""
    plain = out / "observability"
    plain.mkdir(exist_ok=True)
    (plain / "rules.yaml").write_text(yamlout.dump(obs.rule_file, sort_keys=False))
    (plain / "dashboard.json").write_text(json.dumps(obs.dashboard, indent=1, sort_keys=True) + "\n")
    return {"observability/rules.yaml": plain / "rules.yaml", "observability/dashboard.json": plain / "dashboard.json"}
