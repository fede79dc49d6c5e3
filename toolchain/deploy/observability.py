"""Observability as code for one deployment: alerts, recording rules, SLO burn rates and a Grafana dashboard.

``toolchain deploy`` writes, next to the manifests (docs/observability.md):

- ``k8s/prometheusrule.yaml``  a PrometheusRule (prometheus-operator ``monitoring.coreos.com/v1``) with
  - the recording rules of the rule table's signals (queue, TTFT quantiles, KV usage, GPU, errors ...),
  - one alert per rule-table row that has a server-side expression (the rows ``toolchain diagnose`` reads),
  - multi-window, multi-burn-rate alerts for the spec's TTFT SLOs (Google SRE workbook, "Alerting on SLOs",
    table 5-8: 1h/5m at 14.4x and 6h/30m at 6x page; 1d/2h at 3x and 3d/6h at 1x open a ticket; 30-day budget),
  - a TPOT alert on the server-side estimate, and alerts for a deployment Prometheus cannot see;
- ``k8s/dashboard.yaml``  a ConfigMap labelled ``grafana_dashboard: "1"`` (the label kube-prometheus-stack's
  Grafana sidecar loads dashboards from), holding ``observability/dashboard.json``;
- ``observability/rules.yaml``  the same rule groups as a plain Prometheus rule file (``promtool check rules``).

Every expression is scoped to the deployment: ``service="<app>"`` (the label the ServiceMonitor's scrape adds) and
``namespace="<ns>"`` when the deployment names one; model series also to ``model="tensorrt_llm"``.
The rule table (``toolchain.artifacts.rule_table``, below the stages, shared with ``toolchain diagnose``) is passed in
as a ``RuleTable`` of its own ``Rule`` and ``Signal`` rows, so that a caller can hand over a subset.

What differs between servers is a ``Server`` (``TRITON`` here; ``toolchain.dynamo.observability.DYNAMO`` for NVIDIA
Dynamo's frontend): the TTFT histogram the SLO burn rates count (its name, unit and buckets), the label that names
the deployment's series (``Scope.app_label``), and the operator's hints. A rule-table row whose recording rules the
server's signals do not define is left out (an alert over a series nobody records could never fire).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolchain import yamlout
from toolchain.artifacts.plan import CellPlan
from toolchain.artifacts.rule_table import Rule, Signal
from toolchain.deploy.manifests import QUEUE_MODEL, Target, _labels
from toolchain.specs.matrix import Cell

# Triton core's default buckets of nv_inference_first_response_histogram_ms (triton-inference-server/core r25.12
# src/metric_model_reporter.h, histogram_options_); a target between two is interpolated as histogram_quantile does.
TTFT_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
SLO_PERIOD = "30d"
# (long window, short window, burn rate, severity): the SRE workbook's recommended multiwindow table
BURN_WINDOWS: tuple[tuple[str, str, float, str], ...] = (
    ("1h", "5m", 14.4, "critical"),
    ("6h", "30m", 6.0, "critical"),
    ("1d", "2h", 3.0, "warning"),
    ("3d", "6h", 1.0, "warning"),
)
GRAFANA_LABEL = {"grafana_dashboard": "1"}
DASHBOARD_SCHEMA_VERSION = 39


@dataclass(frozen=True)
class LatencyHistogram:
    """A server's TTFT histogram: its family name, the unit of its ``le`` bounds and its finite buckets."""

    name: str
    buckets: tuple[float, ...]  # finite upper bounds, in the histogram's unit
    ms_per_unit: float = 1.0  # 1 for a histogram in ms, 1000 for one in seconds


@dataclass(frozen=True)
class Server:
    """What the alerts and dashboard of one kind of server need to know about it."""

    name: str  # a dashboard tag
    ttft: LatencyHistogram
    ttft_missing: str  # why the TTFT histogram may be absent
    ttft_missing_action: str
    not_scraped: str  # what an absent ``up`` means
    not_scraped_action: str
    burn_action: str  # the first thing to check when the TTFT budget burns
    diagnose: str  # the diagnose command line for an alert's annotation


TRITON = Server(
    name="triton",
    ttft=LatencyHistogram("nv_inference_first_response_histogram_ms", TTFT_BUCKETS_MS),
    ttft_missing="Triton exports nv_inference_first_response_histogram_ms only with --metrics-config "
    "histogram_latencies=true and (before 2.65) for decoupled models",
    ttft_missing_action="serve with serving.decoupled: true on a Triton 25.x image; the toolchain entrypoint passes "
    "the metrics config",
    not_scraped="Prometheus has no healthy target for the service: every alert of this deployment is blind",
    not_scraped_action="kubectl get pods and the ServiceMonitor; check the pods are ready and the metrics port",
    burn_action="run `toolchain diagnose --metrics-url` on a pod; check the queue (LLMQueueTimeHigh) and prefill "
    "interference (LLMPrefillInterference) alerts first",
    diagnose="toolchain diagnose --rules; toolchain diagnose --metrics-url http://<pod>:8002/metrics",
)


@dataclass(frozen=True)
class RuleTable:
    """The diagnosis rule table (``toolchain.artifacts.rule_table``): the rows and the recording rules they read."""

    rules: Sequence[Rule]
    signals: Sequence[Signal]


@dataclass(frozen=True)
class Scope:
    """The label matchers of one deployment's series: ``app_label="<app_value or app>"`` (Triton: the Service the
    ServiceMonitor scrapes), the namespace, and for model series the model."""

    app: str
    namespace: str | None = None
    model: str = QUEUE_MODEL
    app_label: str = "service"
    app_value: str | None = None

    @property
    def sel(self) -> str:
        s = f'{self.app_label}="{self.app_value or self.app}"'
        return s + (f',namespace="{self.namespace}"' if self.namespace else "")

    @property
    def by(self) -> str:
        """The labels every recording rule keeps (and every join matches on)."""
        return f"namespace, {self.app_label}"

    @property
    def model_sel(self) -> str:
        return f'{self.sel},model="{self.model}"'

    def fill(self, expr: str) -> str:
        return expr.replace("$MODEL", self.model_sel).replace("$SEL", self.sel)


@dataclass(frozen=True)
class Slo:
    """One latency target of the spec: ``percentile`` % of requests within ``target_ms``."""

    metric: str  # ttft | tpot
    percentile: int  # 50 | 90 | 99
    target_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.percentile}"

    @property
    def budget(self) -> float:
        """The error budget: the share of requests allowed over the target."""
        return round(1 - self.percentile / 100, 6)


def slos_of(cell: Cell) -> list[Slo]:
    """The spec's latency targets, TTFT then TPOT, each percentile that is set."""
    out = []
    for metric in ("ttft", "tpot"):
        p = getattr(cell.spec.slo, f"{metric}_ms")
        for q in (50, 90, 99):
            v = getattr(p, f"p{q}")
            if v is not None:
                out.append(Slo(metric, q, float(v)))
    return out


# ---------------------------------------------------------------- rules


def _le_values(v: float) -> str:
    """A bucket bound as the server writes it, and as Prometheus 3 normalises it ("500" / "500.0"), as a regex
    (the dot in brackets: a bare one would let "1|1.0" match the bucket "100")."""
    s = f"{v:g}"
    return f"{s}|{s}[.]0" if "." not in s and "e" not in s else s.replace(".", "[.]")


def _bucket_rate(scope: Scope, le: float, window: str, hist: LatencyHistogram) -> str:
    return f'sum by ({scope.by}) (rate({hist.name}_bucket{{{scope.model_sel},le=~"{_le_values(le)}"}}[{window}]))'


def good_rate(scope: Scope, target_ms: float, window: str, hist: LatencyHistogram = TRITON.ttft) -> str:
    """Requests per second whose first response came within ``target_ms``: the bucket at the target, or the
    linear interpolation between the buckets around it (what histogram_quantile assumes); above the last finite
    bucket, that bucket (which counts some good requests as bad: the alert errs towards firing)."""
    target = target_ms / hist.ms_per_unit
    lower = [b for b in hist.buckets if b <= target]
    upper = [b for b in hist.buckets if b > target]
    if lower and lower[-1] == target:
        return _bucket_rate(scope, target, window, hist)
    if not upper:
        return _bucket_rate(scope, lower[-1], window, hist)
    hi = upper[0]
    if not lower:
        return f"({_bucket_rate(scope, hi, window, hist)} * {target / hi:g})"
    lo = lower[-1]
    frac = (target - lo) / (hi - lo)
    low, high = _bucket_rate(scope, lo, window, hist), _bucket_rate(scope, hi, window, hist)
    return f"({low} + ({high} - {low}) * {frac:g})"


def error_ratio_record(slo: Slo, window: str) -> str:
    return f"toolchain:slo_{slo.name}:error_ratio_rate{window}"


def _slo_windows(slo: Slo) -> list[tuple[str, str, float, str]]:
    """The burn-rate windows an SLO can reach: a burn rate whose threshold (rate x budget) is 1 or more can never
    fire (no more than every request can miss), so it is left out."""
    return [w for w in BURN_WINDOWS if w[2] * slo.budget < 1]


def slo_groups(scope: Scope, slos: Sequence[Slo], server: Server = TRITON) -> list[dict[str, Any]]:
    """Recording rules for each TTFT SLO's error ratio per window, and its burn-rate alerts."""
    hist = server.ttft
    groups: list[dict[str, Any]] = []
    for slo in slos:
        if slo.metric != "ttft":
            continue
        windows = _slo_windows(slo)
        needed = sorted({w for lw, sw, _, _ in windows for w in (lw, sw)}, key=_seconds)
        records = [
            {
                "record": error_ratio_record(slo, w),
                "expr": f"1 - ({good_rate(scope, slo.target_ms, w, hist)} / sum by ({scope.by}) "
                f"(rate({hist.name}_count{{{scope.model_sel}}}[{w}])))",
                "labels": {"slo": slo.name},
            }
            for w in needed
        ]
        alerts = []
        for long_w, short_w, rate, severity in windows:
            threshold = f"({rate:g} * {slo.budget:g})"
            alerts.append(
                {
                    "alert": f"LLM{slo.metric.upper()}P{slo.percentile}BudgetBurn",
                    "expr": f"{error_ratio_record(slo, long_w)}{{{scope.sel}}} > {threshold} "
                    f"and on ({scope.by}) {error_ratio_record(slo, short_w)}{{{scope.sel}}} > {threshold}",
                    "labels": {
                        "severity": severity,
                        "slo": slo.name,
                        "long_window": long_w,
                        "short_window": short_w,
                        "deployment": scope.app,
                    },
                    "annotations": {
                        "summary": f"{scope.app}: TTFT P{slo.percentile} SLO ({slo.target_ms:g} ms) error budget "
                        f"burning at {rate:g}x over {long_w} and {short_w}",
                        "description": f"{{{{ $value | humanizePercentage }}}} of requests took longer than "
                        f"{slo.target_ms:g} ms to their first token over the last {long_w} (budget "
                        f"{slo.budget:.0%} over {SLO_PERIOD}; at {rate:g}x it is spent in "
                        f"{_days(SLO_PERIOD) / rate:.1f} days)",
                        "action": server.burn_action,
                    },
                }
            )
        groups.append({"name": f"toolchain.{scope.app}.slo.{slo.name}", "rules": records + alerts})
    return groups


def _seconds(w: str) -> int:
    return int(w[:-1]) * {"m": 60, "h": 3600, "d": 86400}[w[-1]]


def _days(w: str) -> float:
    return _seconds(w) / 86400


RECORD = re.compile(r"\btoolchain:[a-zA-Z0-9_:]+")


def _table_alerts(table: RuleTable, scope: Scope, prefix_caching: bool, server: Server) -> list[dict[str, Any]]:
    recorded = {s.record for s in table.signals}
    out = []
    for r in table.rules:
        if r.expr is None or (r.step == "prefix-cache" and not prefix_caching):
            continue
        if not set(RECORD.findall(r.expr + (r.critical_expr or ""))) <= recorded:
            continue  # the server's signals do not record what the row reads
        levels = [(r.severity, r.expr)] + ([("critical", r.critical_expr)] if r.critical_expr else [])
        for severity, expr in levels:
            out.append(
                {
                    "alert": r.alert,
                    "expr": scope.fill(expr),
                    "for": r.for_,
                    "labels": {"severity": severity, "rule": r.name, "deployment": scope.app},
                    "annotations": {
                        "summary": f"{scope.app}: {r.name} ({r.fires_when})",
                        "description": r.evidence,
                        "action": r.action,
                        "diagnose": server.diagnose,
                    },
                }
            )
    return out


def _health_alerts(scope: Scope, slos: Sequence[Slo], server: Server = TRITON) -> list[dict[str, Any]]:
    """What an SRE needs besides the rules: the deployment is scraped, and the SLO alerts are not blind."""
    out: list[dict[str, Any]] = [
        {
            "alert": "LLMServerNotScraped",
            "expr": f"absent(up{{{scope.sel}}} == 1)",
            "for": "10m",
            "labels": {"severity": "critical", "deployment": scope.app},
            "annotations": {
                "summary": f"{scope.app}: no pod of the deployment answers its metrics scrape",
                "description": server.not_scraped,
                "action": server.not_scraped_action,
            },
        }
    ]
    if any(s.metric == "ttft" for s in slos):
        out.append(
            {
                "alert": "LLMLatencyHistogramMissing",
                "expr": f"absent({server.ttft.name}_count{{{scope.model_sel}}})",
                "for": "30m",
                "labels": {"severity": "warning", "deployment": scope.app},
                "annotations": {
                    "summary": f"{scope.app}: no first-response histogram, so the TTFT SLO alerts cannot fire",
                    "description": server.ttft_missing,
                    "action": server.ttft_missing_action,
                },
            }
        )
    tpot = [s for s in slos if s.metric == "tpot"]
    if tpot and server is TRITON:  # the other servers' TPOT alerts read their own per-token histograms
        slo = min(tpot, key=lambda s: s.percentile)  # the mean is compared with the lowest percentile's target
        out.append(
            {
                "alert": "LLMTPOTOverSLO",
                "expr": f"toolchain:tpot_ms:iteration_mean{{{scope.sel}}} > {slo.target_ms:g}",
                "for": "15m",
                "labels": {"severity": "warning", "slo": slo.name, "deployment": scope.app},
                "annotations": {
                    "summary": f"{scope.app}: mean time per engine iteration is over the TPOT P{slo.percentile} "
                    f"target ({slo.target_ms:g} ms)",
                    "description": '{{ $value | printf "%.1f" }} ms per iteration (the server-side TPOT '
                    "estimate; Triton exports no per-token latency histogram)",
                    "action": "check KV usage and batch size against the plan (`toolchain plan`); confirm with "
                    "`toolchain bench` TPOT quantiles",
                },
            }
        )
    return out


def rule_groups(
    table: RuleTable,
    scope: Scope,
    slos: Sequence[Slo] = (),
    *,
    prefix_caching: bool = True,
    server: Server = TRITON,
    health: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The Prometheus rule groups of one deployment (the ``groups`` of a rule file and a PrometheusRule);
    ``health`` adds the server's own alerts to the health group."""
    records = [{"record": s.record, "expr": scope.fill(s.expr)} for s in table.signals]
    return [
        {"name": f"toolchain.{scope.app}.signals", "rules": records},
        *slo_groups(scope, slos, server),
        {"name": f"toolchain.{scope.app}.diagnose", "rules": _table_alerts(table, scope, prefix_caching, server)},
        {"name": f"toolchain.{scope.app}.health", "rules": [*_health_alerts(scope, slos, server), *health]},
    ]


def prometheus_rule_object(
    name: str, labels: dict[str, str], groups: list[dict[str, Any]], namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {}), "labels": labels}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": groups},
    }


def prometheus_rule(t: Target, cell: Cell, groups: list[dict[str, Any]]) -> dict[str, Any]:
    return prometheus_rule_object(t.app, _labels(t, cell), groups)


# ---------------------------------------------------------------- dashboard


def _panel(
    pid: int,
    title: str,
    targets: list[tuple[str, str]],
    *,
    unit: str,
    x: int,
    y: int,
    thresholds: list[tuple[str, float | None]] | None = None,
    description: str = "",
) -> dict[str, Any]:
    steps = [{"color": c, "value": v} for c, v in (thresholds or [("green", None)])]
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": {"mode": "absolute", "steps": steps},
                "custom": {"thresholdsStyle": {"mode": "line" if thresholds else "off"}},
            },
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(
    table: RuleTable, scope: Scope, slos: Sequence[Slo], tpot_floor_ms: float | None, *, title: str
) -> dict[str, Any]:
    """A Grafana dashboard of one deployment: latency against its SLOs, queue, batch, KV, throughput, GPU, errors;
    the threshold lines of the queue, KV, GPU and error panels are the rule table's."""
    rule = {r.name: r for r in table.rules}
    queue, kv, gpu_util = rule["undersized"], rule["kv-preemption-risk"], rule["gpu-underutilised"]
    kv_steps: list[tuple[str, float | None]] = [("green", None), ("orange", kv.threshold)]
    if kv.critical_above is not None:
        kv_steps.append(("red", kv.critical_above))
    s, m = scope.sel, scope.model_sel
    ttft = {x.percentile: x.target_ms for x in slos if x.metric == "ttft"}
    tpot = {x.percentile: x.target_ms for x in slos if x.metric == "tpot"}
    ttft_thr: list[tuple[str, float | None]] = [("green", None)]
    if ttft:
        ttft_thr.append(("red", ttft[max(ttft)]))
    tpot_thr: list[tuple[str, float | None]] = [("green", None)]
    if tpot_floor_ms is not None:
        tpot_thr = [("blue", None), ("green", round(tpot_floor_ms, 3))]  # below the floor is physically impossible
    if tpot:
        tpot_thr.append(("red", tpot[min(tpot)]))
    gpu = f'pod=~"{scope.app}-.*"' + (f',namespace="{scope.namespace}"' if scope.namespace else "")
    gpu_exported = f'exported_pod=~"{scope.app}-.*"' + (
        f',exported_namespace="{scope.namespace}"' if scope.namespace else ""
    )
    rows: list[Row] = [
        (
            "TTFT (server side)",
            [(f"toolchain:ttft_ms:p50{{{s}}}", "P50"), (f"toolchain:ttft_ms:p99{{{s}}}", "P99")],
            "ms",
            ttft_thr,
            "Time to first response from Triton's histogram; the red line is the spec's TTFT target.",
        ),
        (
            "TPOT (server-side estimate)",
            [(f"toolchain:tpot_ms:iteration_mean{{{s}}}", "mean time per engine iteration")],
            "ms",
            tpot_thr,
            "Mean time per engine iteration; green line: the planner's batch-1 TPOT floor, red: the TPOT target.",
        ),
        (
            "Queue time",
            [(f"toolchain:queue_ms:p99{{{s}}}", "P99"), (f"toolchain:queue_ms:mean{{{s}}}", "mean")],
            "ms",
            [("green", None), ("red", queue.threshold)],
            "Time requests wait in Triton's queue; above the line the deployment is undersized.",
        ),
        (
            "In-flight requests",
            [
                (f'sum(nv_trt_llm_request_metrics{{{m},request_type="active"}})', "active"),
                (f'sum(nv_trt_llm_request_metrics{{{m},request_type="max"}})', "batch limit"),
                (f"sum(nv_inference_pending_request_count{{{m}}})", "pending in Triton"),
            ],
            "short",
            None,
            "",
        ),
        (
            "KV cache",
            [(f"toolchain:kv_usage:max{{{s}}}", "peak block usage")],
            "percentunit",
            kv_steps,
            "Share of KV-cache blocks in use (worst pod).",
        ),
        (
            "Prefix-cache reuse",
            [(f'sum(deriv(nv_trt_llm_kv_cache_block_metrics{{{m},kv_cache_block_type="reused"}}[5m]))', "blocks/s")],
            "short",
            None,
            "KV blocks reused from the prefix cache per second.",
        ),
        (
            "Throughput",
            [
                (f"toolchain:requests:rate5m{{{s}}}", "requests/s"),
                (
                    f'sum(rate(nv_llm_output_token_len_sum{{{m},response_metric_type="total_output_tokens"}}[5m]))',
                    "output tokens/s",
                ),
            ],
            "short",
            None,
            "",
        ),
        (
            "GPU utilisation (DCGM)",
            [
                (
                    f"avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{{gpu}}}) or "
                    f"avg by (exported_pod) (DCGM_FI_DEV_GPU_UTIL{{{gpu_exported}}})",
                    "{{pod}}{{exported_pod}}",
                ),
            ],
            "percent",
            [("red", None), ("green", 100 * gpu_util.threshold)],  # DCGM reports percent
            "DCGM exporter; below the line at peak load, see LLMGPUUnderutilised.",
        ),
        (
            "GPU memory (DCGM)",
            [
                (
                    f"sum by (pod) (DCGM_FI_DEV_FB_USED{{{gpu}}}) or "
                    f"sum by (exported_pod) (DCGM_FI_DEV_FB_USED{{{gpu_exported}}})",
                    "used {{pod}}{{exported_pod}}",
                ),
                (
                    f"sum by (pod) (DCGM_FI_DEV_FB_FREE{{{gpu}}}) or "
                    f"sum by (exported_pod) (DCGM_FI_DEV_FB_FREE{{{gpu_exported}}})",
                    "free {{pod}}{{exported_pod}}",
                ),
            ],
            "decmbytes",
            None,
            "Frame-buffer memory (MiB); the KV cache is allocated up front, so used memory stays high.",
        ),
        (
            "Errors",
            [
                (f"sum by (reason) (rate(nv_inference_request_failure{{{m}}}[5m]))", "{{reason}}"),
                (f"toolchain:errors:ratio_rate5m{{{s}}}", "failed share"),
            ],
            "short",
            None,
            "Failed requests per second by reason, and the failed share (LLMRequestErrors above 1%).",
        ),
    ]
    rows += burn_rows(scope, slos)
    return board(scope, rows, title=title, server=TRITON)


Row = tuple[str, list[tuple[str, str]], str, list[tuple[str, float | None]] | None, str]


def burn_rows(scope: Scope, slos: Sequence[Slo]) -> list[Row]:
    """One panel per TTFT SLO: its error-budget burn rate over the first window that can page."""
    rows: list[Row] = []
    for slo in slos:
        if slo.metric == "ttft" and _slo_windows(slo):
            w = _slo_windows(slo)[0]
            rows.append(
                (
                    f"TTFT P{slo.percentile} error budget burn",
                    [(f"{error_ratio_record(slo, w[0])}{{{scope.sel}}} / {slo.budget:g}", f"burn rate over {w[0]}")],
                    "short",
                    [("green", None), ("red", w[2])],
                    f"1 = spending the {SLO_PERIOD} budget exactly; the red line pages.",
                )
            )
    return rows


def board(scope: Scope, rows: Sequence[Row], *, title: str, server: Server) -> dict[str, Any]:
    """The Grafana dashboard JSON of panel rows (title, targets, unit, thresholds, description), three a row."""
    panels = [
        _panel(i + 1, t, targets, unit=u, x=(i % 3) * 8, y=(i // 3) * 8, thresholds=thr, description=d)
        for i, (t, targets, u, thr, d) in enumerate(rows)
    ]
    return {
        "uid": scope.app[:40],
        "title": title,
        "tags": ["toolchain", "llm", server.name],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": DASHBOARD_SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def dashboard_configmap_object(
    app: str, labels: dict[str, str], board: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    """The ConfigMap kube-prometheus-stack's Grafana sidecar loads a dashboard from."""
    meta: dict[str, Any] = {"name": f"{app}-dashboard", **({"namespace": namespace} if namespace else {})}
    meta["labels"] = {**labels, **GRAFANA_LABEL}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {f"{app}.json": json.dumps(board, indent=1, sort_keys=True)},
    }


def dashboard_configmap(t: Target, cell: Cell, board: dict[str, Any]) -> dict[str, Any]:
    return dashboard_configmap_object(t.app, _labels(t, cell), board)


# ---------------------------------------------------------------- writing


@dataclass(frozen=True)
class Observability:
    rule_file: dict[str, Any]  # {"groups": [...]}
    prometheus_rule: dict[str, Any]
    dashboard: dict[str, Any]
    configmap: dict[str, Any]


def build(t: Target, cell: Cell, plan: CellPlan, table: RuleTable) -> Observability:
    """The alerts, recording rules and dashboard of one deployment."""
    scope = Scope(t.app, t.namespace)
    slos = slos_of(cell)
    floor = getattr(plan, "tpot_floor_b1_ms", None)
    groups = rule_groups(table, scope, slos, prefix_caching=bool(cell.spec.serving.enable_prefix_caching))
    grafana = dashboard(table, scope, slos, floor, title=f"{cell.spec.name} {cell.id} ({t.app})")
    return Observability(
        {"groups": groups}, prometheus_rule(t, cell, groups), grafana, dashboard_configmap(t, cell, grafana)
    )


def notes(cell: Cell) -> list[str]:
    """What the operator should know about the alerts of this cell."""
    out = []
    if any(s.metric == "ttft" for s in slos_of(cell)) and not cell.spec.serving.decoupled:
        out.append(
            "the TTFT SLO alerts read Triton's first-response histogram, which Triton 2.64 (25.12) exports for "
            "decoupled models only: set serving.decoupled: true, or LLMLatencyHistogramMissing will fire"
        )
    return out


def write_observability(out: Path, t: Target, cell: Cell, plan: CellPlan, table: RuleTable, header: str) -> list[str]:
    """Write the PrometheusRule and dashboard ConfigMap into ``out/k8s`` (listed in its kustomization) and the
    plain rule file and dashboard JSON into ``out/observability``; the notes for the operator."""
    obs = build(t, cell, plan, table)
    k8s, plain = out / "k8s", out / "observability"
    plain.mkdir(exist_ok=True)
    files = {"prometheusrule.yaml": obs.prometheus_rule, "dashboard.yaml": obs.configmap}
    for name, obj in files.items():
        (k8s / name).write_text(header + yamlout.dump(obj, sort_keys=False, default_flow_style=False))
    (plain / "rules.yaml").write_text(header + yamlout.dump(obs.rule_file, sort_keys=False))
    (plain / "dashboard.json").write_text(json.dumps(obs.dashboard, indent=1, sort_keys=True) + "\n")
    kz = k8s / "kustomization.yaml"
    k = yaml.safe_load(kz.read_text())
    k["resources"] = [*k["resources"], *(n for n in files if n not in k["resources"])]
    kz.write_text(header + yamlout.dump(k, sort_keys=False, default_flow_style=False))
    return notes(cell)
