"""The deployment's alerts, recording rules and dashboard, checked by Prometheus's own tool.

- ``promtool check rules`` on every rule file `toolchain deploy` writes (and on the PrometheusRule's groups);
- ``promtool test rules`` with synthetic Triton series, one scenario per cookbook symptom: each alert fires on
  its symptom and stays silent on the healthy series and on the neighbouring symptoms (a long queue is
  "undersized", not "interference"; an idle GPU off peak is not a scheduling problem), and the SLO burn-rate
  alerts page or ticket by window (SRE workbook table 5-8);
- every dashboard expression parses (each wrapped as a recording rule for ``promtool check rules``);
- the dashboard has what Grafana's import needs; the diagnose CLI and the alerts read one table.

promtool comes from Debian's ``prometheus`` package (scripts/setup.sh extracts it, never starts the service).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli
from tests.deploy.conftest import SHIPPED, check_grafana_import
from tests.helpers import deploy_target
from toolchain.artifacts.rule_table import RULES, SIGNALS
from toolchain.deploy.observability import RuleTable, Scope, Slo, build, dashboard, rule_groups
from toolchain.planning.plan import plan_cell
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

VENV_PROMTOOL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "promtool"  # where scripts/setup.sh puts it
PROMTOOL = shutil.which("promtool") or (str(VENV_PROMTOOL) if VENV_PROMTOOL.is_file() else None)


@pytest.fixture
def promtool() -> str:
    """promtool is a validator like the others: missing, the test fails (CI must not pass without it)."""
    if PROMTOOL is None:
        pytest.fail("promtool is not installed — run scripts/setup.sh (it installs it from Debian's prometheus)")
    return PROMTOOL


needs_promtool = pytest.mark.usefixtures("promtool")
TABLE = RuleTable(RULES, SIGNALS)
SCOPE = Scope("app", "llm")
SLOS = [Slo("ttft", 99, 500.0), Slo("tpot", 99, 30.0)]
CELLS = [c for spec in SHIPPED for c in expand(load_spec(spec))]


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _check(path: Path) -> None:
    r = _promtool("check", "rules", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


# ---------------------------------------------------------------- promtool check rules


@pytest.mark.slow
@needs_promtool
@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_every_shipped_cells_rules_pass_promtool_check(cell: Any, tmp_path: Path) -> None:
    obs = build(deploy_target(), cell, plan_cell(cell, arch_for_spec(cell.spec, allow_network=False)), TABLE)
    plain = tmp_path / "rules.yaml"
    plain.write_text(yaml.safe_dump(obs.rule_file))
    _check(plain)
    crd = tmp_path / "prometheusrule-groups.yaml"  # what the operator hands Prometheus: the spec's groups
    crd.write_text(yaml.safe_dump({"groups": obs.prometheus_rule["spec"]["groups"]}))
    _check(crd)
    alerts = {r["alert"] for g in obs.rule_file["groups"] for r in g["rules"] if "alert" in r}
    assert {r.alert for r in RULES if r.expr} - {"LLMPrefixCacheUnused"} <= alerts
    assert "LLMTTFTP99BudgetBurn" in alerts  # every shipped spec sets a TTFT P99 target


@needs_promtool
def test_promtool_check_refuses_a_broken_expression(tmp_path: Path) -> None:
    groups = rule_groups(TABLE, SCOPE, SLOS)
    groups[0]["rules"][0]["expr"] = groups[0]["rules"][0]["expr"].replace(")", "", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"groups": groups}))
    assert _promtool("check", "rules", str(bad)).returncode != 0


@needs_promtool
def test_deploy_writes_rules_and_dashboard_that_pass_the_checks(
    tiny_spec_file: Path, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    from toolchain.deploy import DeployOptions
    from toolchain.pipeline.fleet import deploy_cell

    out = tmp_path / "out"
    deploy_cell(
        load_spec(tiny_spec_file),
        cell_id=None,
        out=out,
        options=DeployOptions(registry="s3://engines/prod", namespace="llm"),
    )
    _check(out / "observability" / "rules.yaml")
    rule = yaml.safe_load((out / "k8s" / "prometheusrule.yaml").read_text())
    cm = yaml.safe_load((out / "k8s" / "dashboard.yaml").read_text())
    for res in (rule, cm):
        validate_manifest(res)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (board_json,) = cm["data"].values()
    assert json.loads(board_json) == json.loads((out / "observability" / "dashboard.json").read_text())
    k = yaml.safe_load((out / "k8s" / "kustomization.yaml").read_text())
    assert {"prometheusrule.yaml", "dashboard.yaml"} <= set(k["resources"])
    app = rule["metadata"]["name"]
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    # every raw selector is scoped to this deployment's namespace and service
    for sel in re.findall(r"\b(?:nv_|DCGM_|up\b)[a-zA-Z0-9_:]*\{([^}]*)\}", "\n".join(exprs)):
        assert f'service="{app}"' in sel and 'namespace="llm"' in sel, sel


# ---------------------------------------------------------------- promtool test rules

POD = 'namespace="llm",service="app",pod="app-0",job="app"'
MODEL = POD + ',model="tensorrt_llm",version="1"'


def _ttft_buckets(shape: str, ok: float, bad: float = 0.0) -> dict[str, float]:
    """Per-minute increments of the first-response histogram's cumulative buckets for ``ok`` responses."""
    if shape == "tight":  # all between 100 and 500 ms: P99/P50 ~ 1.7
        return {"100": 0, "500": ok, "2000": ok, "5000": ok, "+Inf": ok}
    if shape == "wide":  # 70 % under 100 ms, the rest up to 500: P99/P50 ~ 6.8
        return {"100": 0.7 * ok, "500": ok, "2000": ok, "5000": ok, "+Inf": ok}
    assert shape == "burn"  # a share ``bad`` over 500 ms
    return {"100": 0, "500": (1 - bad) * ok, "2000": ok, "5000": ok, "+Inf": ok}


def _counter(segments: list[tuple[float, int]]) -> str:
    """promtool's expanding notation for a counter growing by ``inc`` per step for ``n`` steps per segment."""
    out, value = [], 0.0
    for inc, n in segments:
        out.append(f"{value:g}+{inc:g}x{n}")
        value += inc * (n + 1)
    return " ".join(out)


def _series(
    minutes: int = 90,
    *,
    queue_p99_ms: float = 20,
    queue_mean_ms: float = 5,
    ttft: list[tuple[str, float, int]] | None = None,  # (shape, bad share, minutes) segments
    kv: float = 0.5,
    gpu: float = 0.85,
    active: int = 9,
    batch: int = 10,
    ok: float = 600,
    failed: float = 0,
    reused: float = 50,
    iterations_s: float = 100,
    up: int = 1,
    histogram: bool = True,
) -> list[dict[str, str]]:
    """One deployment's Triton series at 1 m steps: healthy unless told otherwise."""
    s: list[tuple[str, str]] = [(f'up{{{POD},instance="10.0.0.1:8002"}}', f"{up}x{minutes}")]
    if not up:
        return [{"series": k, "values": v} for k, v in s]
    s += [
        (f'nv_inference_queue_summary_us{{{MODEL},quantile="0.99"}}', f"{queue_p99_ms * 1000:g}x{minutes}"),
        (f"nv_inference_queue_duration_us{{{MODEL}}}", _counter([(queue_mean_ms * 1000 * ok, minutes)])),
        (f"nv_inference_request_success{{{MODEL}}}", _counter([(ok, minutes)])),
        (f'nv_inference_request_failure{{{MODEL},reason="BACKEND"}}', _counter([(failed, minutes)])),
        (f'nv_trt_llm_kv_cache_block_metrics{{{MODEL},kv_cache_block_type="fraction"}}', f"{kv:g}x{minutes}"),
        (f'nv_trt_llm_kv_cache_block_metrics{{{MODEL},kv_cache_block_type="reused"}}', _counter([(reused, minutes)])),
        (f'nv_gpu_utilization{{{POD},gpu_uuid="GPU-0"}}', f"{gpu:g}x{minutes}"),
        (f'nv_trt_llm_request_metrics{{{MODEL},request_type="active"}}', f"{active}x{minutes}"),
        (f'nv_trt_llm_request_metrics{{{MODEL},request_type="max"}}', f"{batch}x{minutes}"),
        (
            f'nv_trt_llm_general_metrics{{{MODEL},general_type="iteration_counter"}}',
            _counter([(iterations_s * 60, minutes)]),
        ),
    ]
    if histogram:
        segs = ttft or [("tight", 0.0, minutes)]
        assert sum(n for *_, n in segs) == minutes
        for le in ("100", "500", "2000", "5000", "+Inf"):
            s.append(
                (
                    f'nv_inference_first_response_histogram_ms_bucket{{{MODEL},le="{le}"}}',
                    _counter([(_ttft_buckets(shape, ok, bad)[le], n) for shape, bad, n in segs]),
                )
            )
        s.append((f"nv_inference_first_response_histogram_ms_count{{{MODEL}}}", _counter([(ok, minutes)])))
    return [{"series": k, "values": v} for k, v in s]


DAY = 1440
# scenario: (series, eval minute, the alerts that fire: (alertname, severity or window))
SCENARIOS: dict[str, tuple[list[dict[str, str]], int, set[tuple[str, str]]]] = {
    "healthy": (_series(), 60, set()),
    # a long queue also widens the TTFT spread: it is "undersized", never "interference"
    "undersized": (
        _series(queue_p99_ms=450, queue_mean_ms=300, active=10, ttft=[("wide", 0, 90)]),
        60,
        {("LLMQueueTimeHigh", "critical")},
    ),
    "interference": (
        _series(queue_p99_ms=50, ttft=[("wide", 0, 90)]),
        60,
        {("LLMPrefillInterference", "warning")},
    ),
    "kv-nearly-full": (_series(kv=0.9), 60, {("LLMKVCacheNearlyFull", "warning")}),
    "kv-full": (_series(kv=0.97), 60, {("LLMKVCacheNearlyFull", "warning"), ("LLMKVCacheNearlyFull", "critical")}),
    "gpu-idle-at-peak": (_series(gpu=0.45), 60, {("LLMGPUUnderutilised", "warning")}),
    "gpu-idle-off-peak": (_series(gpu=0.45, active=2), 60, set()),  # a quiet hour is not a scheduling problem
    "errors": (_series(failed=30), 60, {("LLMRequestErrors", "critical")}),
    "prefix-cache-unused": (_series(reused=0), 75, {("LLMPrefixCacheUnused", "info")}),
    "tpot-slow": (_series(iterations_s=20), 60, {("LLMTPOTOverSLO", "warning")}),
    "not-scraped": (
        _series(up=0),
        60,
        {("LLMServerNotScraped", "critical"), ("LLMLatencyHistogramMissing", "warning")},
    ),
    "histogram-missing": (_series(histogram=False), 60, {("LLMLatencyHistogramMissing", "warning")}),
    # SLO burn rates over 3 days of history (budget 1 %), evaluated every 30 m, so the last evaluation before
    # the check at 3d 1h30m is at 3d 1h: a sudden 20 % for the last hour pages on 1h/5m only ...
    "fast-burn": (
        _series(3 * DAY + 120, ttft=[("burn", 0.005, 3 * DAY), ("burn", 0.2, 120)]),
        3 * DAY + 90,
        # the page comes with its diagnosis: a TTFT spread over 5 with a short queue
        {("LLMTTFTP99BudgetBurn", "1h"), ("LLMPrefillInterference", "warning")},
    ),
    # ... 7 % for the last 6.5 h pages on 6h/30m (a 1 h window is under 14.4x, the day and 3 days under theirs) ...
    "medium-burn": (
        _series(3 * DAY + 120, ttft=[("burn", 0.001, 3 * DAY + 120 - 390), ("burn", 0.07, 390)]),
        3 * DAY + 90,
        {("LLMTTFTP99BudgetBurn", "6h"), ("LLMPrefillInterference", "warning")},
    ),
    # ... 4 % for the last 22 h opens the 1d/2h ticket, and then also the 3d/6h one (a day over 3x is 3 days over 1x)
    "day-burn": (
        _series(3 * DAY + 120, ttft=[("burn", 0.001, 3 * DAY + 120 - 22 * 60), ("burn", 0.04, 22 * 60)]),
        3 * DAY + 90,
        {("LLMTTFTP99BudgetBurn", "1d"), ("LLMTTFTP99BudgetBurn", "3d"), ("LLMPrefillInterference", "warning")},
    ),
    # ... 2 % for three days opens the 3d/6h ticket only ...
    "slow-burn": (
        _series(3 * DAY + 120, ttft=[("burn", 0.02, 3 * DAY + 120)]),
        3 * DAY + 90,
        {("LLMTTFTP99BudgetBurn", "3d")},
    ),
    # ... and 0.5 % (half the budget) pages nobody
    "within-budget": (_series(3 * DAY + 120, ttft=[("burn", 0.005, 3 * DAY + 120)]), 3 * DAY + 90, set()),
}


def _strip_annotations(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules without annotations, in one group. promtool compares annotations verbatim, and their templates are
    checked by `promtool check rules` above; this test is about when each alert fires and with which labels. One
    group evaluates in order (recording rules before the alerts that read them); separate groups run in no fixed
    order, which at the 30 m steps of the 3-day scenarios would leave an alert reading a 30 m old recording (at
    Prometheus's 1 m interval the previous evaluation is within the 5 m lookback)."""
    rules = [{k: v for k, v in r.items() if k != "annotations"} for g in groups for r in g["rules"]]
    return [{"name": "toolchain.app.all", "rules": rules}]


def _alert_rules(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in groups for r in g["rules"] if "alert" in r]


def _key(rule: dict[str, Any]) -> tuple[str, str]:
    return rule["alert"], rule["labels"].get("long_window") or rule["labels"]["severity"]


def _output_labels(rule: dict[str, Any]) -> dict[str, str]:
    """The labels an alert's expression yields: the deployment's, or for ``absent(selector)`` the selector's
    equality matchers (none when the selector is compared)."""
    if rule["expr"].startswith("absent("):
        inner = rule["expr"][len("absent(") : -1]
        return {} if "==" in inner else dict(re.findall(r'([a-z_]+)="([^"]*)"', inner))
    return {"namespace": "llm", "service": "app"}


def _tests(groups: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    rules = _alert_rules(groups)
    tests = []
    for name in names:
        series, at, firing = SCENARIOS[name]
        checks = []
        for alert in sorted({r["alert"] for r in rules}):
            exp = [
                {"exp_labels": {**r["labels"], **_output_labels(r)}}
                for r in rules
                if r["alert"] == alert and _key(r) in firing
            ]
            checks.append({"eval_time": f"{at}m", "alertname": alert, "exp_alerts": exp})
        tests.append({"name": name, "interval": "1m", "input_series": series, "alert_rule_test": checks})
    return tests


@pytest.mark.slow
@needs_promtool
def test_each_alert_fires_on_its_symptom_and_only_there(tmp_path: Path) -> None:
    groups = _strip_annotations(rule_groups(TABLE, SCOPE, SLOS, prefix_caching=True))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    short = [n for n, (_, at, _) in SCENARIOS.items() if at < DAY]
    long = [n for n in SCENARIOS if n not in short]
    # the 3-day scenarios are evaluated every 30 m (the burn-rate alerts have no `for`), the rest every minute
    for f, names, every in (("short.yaml", short, "1m"), ("long.yaml", long, "30m")):
        test = {"rule_files": ["rules.yaml"], "evaluation_interval": every, "tests": _tests(groups, names)}
        (tmp_path / f).write_text(yaml.safe_dump(test, sort_keys=False))
    r = _promtool("test", "rules", "short.yaml", "long.yaml", cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    # every alert rule is expected to fire in some scenario: promtool test rules covers every rule
    covered = set().union(*(f for _, _, f in SCENARIOS.values()))
    assert {_key(r) for r in _alert_rules(groups)} == covered


@needs_promtool
def test_the_scenarios_can_fail(tmp_path: Path) -> None:
    """The same harness with one expectation wrong (interference expected on the undersized series) fails."""
    groups = _strip_annotations(rule_groups(TABLE, SCOPE, SLOS, prefix_caching=True))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = _tests(groups, ["undersized"])
    for check in tests[0]["alert_rule_test"]:
        if check["alertname"] == "LLMPrefillInterference":
            check["exp_alerts"] = [{"exp_labels": {"severity": "warning", "namespace": "llm", "service": "app"}}]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": tests}))
    assert _promtool("test", "rules", "test.yaml", cwd=tmp_path).returncode != 0


@needs_promtool
@pytest.mark.parametrize(("target_ms", "bad"), [(500.0, 0.2), (300.0, 0.5), (50.0, 0.9), (8000.0, 0.0)])
def test_slo_error_ratio_interpolates_between_buckets(tmp_path: Path, target_ms: float, bad: float) -> None:
    """100 responses a minute: 20 under 100 ms, 80 under 500, all under 2000. The error ratio at a target between
    two buckets is interpolated as histogram_quantile does; above the last finite bucket it uses that bucket."""
    slo = Slo("ttft", 99, target_ms)
    groups = rule_groups(TABLE, SCOPE, [slo])
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    inc = {"100": 20, "500": 80, "2000": 100, "5000": 100, "+Inf": 100}
    series = [
        {"series": f'nv_inference_first_response_histogram_ms_bucket{{{MODEL},le="{le}"}}', "values": f"0+{v}x30"}
        for le, v in inc.items()
    ] + [{"series": f"nv_inference_first_response_histogram_ms_count{{{MODEL}}}", "values": "0+100x30"}]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'round(1000 * toolchain:slo_ttft_p99:error_ratio_rate5m{service="app"})',
                        "eval_time": "20m",
                        "exp_samples": [
                            {"labels": '{namespace="llm",service="app",slo="ttft_p99"}', "value": bad * 1000}
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    r = _promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_burn_windows_are_the_sre_workbooks_and_unreachable_ones_are_left_out() -> None:
    def alerts(slo: Slo) -> list[dict[str, Any]]:
        return [r for r in _alert_rules(rule_groups(TABLE, SCOPE, [slo])) if r["alert"].endswith("BudgetBurn")]

    p99 = alerts(Slo("ttft", 99, 500))
    assert [(r["labels"]["long_window"], r["labels"]["short_window"], r["labels"]["severity"]) for r in p99] == [
        ("1h", "5m", "critical"),
        ("6h", "30m", "critical"),
        ("1d", "2h", "warning"),
        ("3d", "6h", "warning"),
    ]
    assert "(14.4 * 0.01)" in p99[0]["expr"] and "(1 * 0.01)" in p99[3]["expr"]
    # a P50 target's budget is 50 %: only a burn rate of 1 can be reached (2 x 50 % is every request)
    assert [r["labels"]["long_window"] for r in alerts(Slo("ttft", 50, 200))] == ["3d"]
    assert [r["labels"]["long_window"] for r in alerts(Slo("ttft", 90, 300))] == ["6h", "1d", "3d"]


# ---------------------------------------------------------------- dashboard


def _board() -> dict[str, Any]:
    return dashboard(TABLE, SCOPE, SLOS, 2.42, title="llama app")


def _dashboard_exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


@needs_promtool
def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    exprs = _dashboard_exprs(_board())
    rules = [{"record": f"dashboard:expr_{i}:check", "expr": e} for i, e in enumerate(exprs)]
    f = tmp_path / "dashboard-exprs.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    _check(f)
    rules[0]["expr"] += " +"  # and the check would notice a broken one
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert _promtool("check", "rules", str(f)).returncode != 0


def test_dashboard_has_what_grafana_import_needs() -> None:
    """Grafana's import (dashboard JSON model, docs/sources/dashboards/build-dashboards/view-dashboard-json-model):
    a title, a schemaVersion, panels with id/type/title/gridPos and Prometheus targets with refId and expr, the
    datasource as a template variable so the import asks for it; ids unique and panels inside the 24-column grid."""
    check_grafana_import(_board())


def test_dashboard_shows_the_slos_and_the_planner_floor() -> None:
    panels = {p["title"]: p for p in _board()["panels"]}

    def lines(title: str) -> list[float | None]:
        return [s["value"] for s in panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]]

    assert lines("TTFT (server side)") == [None, 500.0]
    assert lines("TPOT (server-side estimate)") == [None, 2.42, 30.0]  # the floor, then the target
    assert lines("Queue time") == [None, 200.0] and lines("KV cache") == [None, 0.8, 0.95]  # the table's
    assert lines("GPU utilisation (DCGM)") == [None, 70.0]
    want = {
        "TTFT (server side)",
        "TPOT (server-side estimate)",
        "Queue time",
        "In-flight requests",
        "KV cache",
        "Prefix-cache reuse",
        "Throughput",
        "GPU utilisation (DCGM)",
        "GPU memory (DCGM)",
        "Errors",
        "TTFT P99 error budget burn",
    }
    assert want == set(panels)


# ---------------------------------------------------------------- metric names exist

DATA = Path(__file__).resolve().parents[1] / "reference" / "metrics"
FUNCTIONS_AND_KEYWORDS = {"up"}  # Prometheus's own target-health series


def _reference_families() -> dict[str, str]:
    """Family name -> kind, from the upstream reference lists (each file names its source)."""
    fam: dict[str, str] = {}
    core = json.loads((DATA / "triton_core.json").read_text())
    fam.update(core["families"])
    trt = json.loads((DATA / "tensorrtllm_backend.json").read_text())
    fam.update({k: v["kind"] for k, v in trt["families"].items()})
    dcgm = json.loads((DATA / "dcgm_exporter.json").read_text())
    fam.update(dcgm["families"])
    fam["up"] = "gauge"
    return fam


def _names_and_labels(exprs: list[str]) -> list[tuple[str, dict[str, str]]]:
    out = []
    for name, sel in re.findall(r"\b([a-zA-Z_][a-zA-Z0-9_:]*)\{([^}]*)\}", "\n".join(exprs)):
        out.append((name, dict(re.findall(r'([a-zA-Z_]+)=~?"([^"]*)"', sel))))
    return out


def _family(name: str, families: dict[str, str]) -> str | None:
    if name in families:
        return name
    for suffix, kinds in (
        ("_bucket", {"histogram"}),
        ("_count", {"histogram", "summary"}),
        ("_sum", {"histogram", "summary"}),
    ):
        base = name.removesuffix(suffix)
        if name.endswith(suffix) and families.get(base) in kinds:
            return base
    return None


def test_every_metric_in_a_rule_or_panel_is_one_upstream_exports() -> None:
    families = _reference_families()
    trt = json.loads((DATA / "tensorrtllm_backend.json").read_text())["families"]
    groups = rule_groups(TABLE, SCOPE, SLOS, prefix_caching=True)
    exprs = [r["expr"] for g in groups for r in g["rules"]] + _dashboard_exprs(_board())
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    seen = set()
    for name, labels in _names_and_labels(exprs):
        if name.startswith("toolchain:"):
            assert name in recorded, f"{name} is read but never recorded"
            continue
        fam = _family(name, families)
        assert fam is not None, f"{name} is exported by none of Triton core, the tensorrtllm backend, DCGM"
        seen.add(fam)
        if fam in trt:  # the category label's value is one the backend sets
            cat = trt[fam]["category"]
            if cat in labels:
                assert labels[cat] in trt[fam]["values"], (name, labels)
    assert {"nv_inference_first_response_histogram_ms", "DCGM_FI_DEV_GPU_UTIL", "nv_trt_llm_general_metrics"} <= seen


def test_the_check_notices_a_misspelt_metric() -> None:
    assert _family("nv_inference_queue_summary_ms", _reference_families()) is None
    assert _family("nv_inference_first_response_histogram_ms_bucket", _reference_families()) is not None
    assert _family("nv_gpu_utilization_bucket", _reference_families()) is None  # a gauge has no buckets


# ---------------------------------------------------------------- one table


def test_diagnose_and_the_alerts_read_one_table(cli: Cli) -> None:
    r = cli("diagnose", "--rules", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rules"]
    assert [x["name"] for x in rows] == [x.name for x in RULES]
    assert [x["step"] for x in rows][:5] == [
        "queue",
        "kv-cache",
        "prefill-interference",
        "prefill-interference",
        "gpu-health",
    ]
    alerts = {a["labels"]["rule"]: a for a in _alert_rules(rule_groups(TABLE, SCOPE, SLOS)) if "rule" in a["labels"]}
    for row in rows:
        if row["expr"] is None:
            assert row["name"] not in alerts
            continue
        a = alerts[row["name"]]
        assert a["alert"] == row["alert"] and a["annotations"]["action"] == row["action"]
        assert a["expr"] == SCOPE.fill(row["expr"]) or a["labels"]["severity"] == "critical"
    plain = cli("diagnose", "--rules")
    assert plain.exit_code == 0 and "1. [queue] undersized" in plain.stdout and "LLMQueueTimeHigh" in plain.stdout


def test_a_finding_carries_the_tables_severity_and_action() -> None:
    from toolchain.artifacts.rule_table import BY_NAME
    from toolchain.diagnose.rules import Observations, diagnose

    found = diagnose(Observations(queue_p99_ms=450, kv_usage_max=0.97, requests_success=90, requests_failure=10))
    assert [f.rule for f in found] == ["undersized", "kv-preemption-risk", "request-errors"]  # the table's order
    for f in found:
        assert f.action == BY_NAME[f.rule].action
    assert found[1].severity == "critical"  # above KV_CRITICAL


def test_a_non_decoupled_cell_with_a_ttft_slo_is_told_its_slo_alerts_are_blind() -> None:
    from toolchain.deploy.observability import notes

    (cell,) = expand(load_spec(SHIPPED[0]))[:1]
    assert cell.spec.serving.decoupled and notes(cell) == []
    blind = cell.spec.model_copy(update={"serving": cell.spec.serving.model_copy(update={"decoupled": False})})
    (note,) = notes(type(cell)(**{**vars(cell), "spec": blind}))
    assert "serving.decoupled: true" in note


def test_rules_with_metrics_is_a_user_error(cli: Cli) -> None:
    r = cli("diagnose", "--rules", "--bench", "run.json")
    assert r.exit_code == 2 and "--rules prints the rule table" in r.output and "Traceback" not in r.output
