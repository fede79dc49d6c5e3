"""The alerts and dashboard `toolchain dynamo deploy` writes next to the DynamoGraphDeployment, checked by their
consumers: ``promtool check rules`` and ``promtool test rules`` (synthetic Dynamo series: each alert fires on its
symptom and stays silent on the healthy series), the prometheus-operator CRD schema for the PrometheusRule, the
strict core schema for the dashboard ConfigMap, Grafana's import needs; and every metric a rule or panel reads is
one Dynamo 1.6.1 serves (tests/reference/metrics/dynamo_1.6.1.json, recorded off a live frontend + mocker run by
scripts/record_dynamo_metrics.py; and, in the slow test, a live scrape)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS
from tests.deploy.conftest import check_grafana_import, render_kustomization
from tests.validators import run, tool

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "metrics" / "dynamo_1.6.1.json"
MODEL = "m"
SCOPE_LABELS = {"namespace", "dynamo_namespace"}  # target labels the PodMonitors add (docs/observability.md)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from toolchain.cli.main import app

    out = tmp_path_factory.mktemp("dgd") / "out"
    args = [
        "dynamo",
        "deploy",
        str(DISAGG),
        "--out",
        str(out),
        "--namespace",
        "llm",
        "--estimator",
        "floor",
        "--allow-unquantized",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def planned() -> Any:
    from toolchain.dynamo.pipeline import plan_spec

    return plan_spec(DISAGG, estimator="floor")


def _groups(planned: Any) -> list[dict[str, Any]]:
    from toolchain.dynamo.observability import groups_of, scope_of

    return groups_of(planned.cell, planned.plan, scope_of("app", "llm", MODEL))


def _check(path: Path) -> None:
    r = run([tool("promtool"), "check", "rules", str(path)])
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- what is written


@pytest.mark.slow
@pytest.mark.validator
def test_written_rules_pass_promtool_and_every_manifest_validates(
    written: Path, validate_manifest: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    _check(written / "observability" / "rules.yaml")
    resources = {r["kind"] + "/" + r["metadata"]["name"]: r for r in render_kustomization(written)}
    rule = resources["PrometheusRule/llama-3-3-70b-instruct-fp8-dynamo-disagg"]
    board_cm = resources["ConfigMap/llama-3-3-70b-instruct-fp8-dynamo-disagg-dashboard"]
    for res in (rule, board_cm):
        validate_manifest(res)  # the recorded prometheus-operator CRD schema; the strict core ConfigMap schema
        assert res["metadata"]["namespace"] == "llm"
    crd = tmp_path / "prometheusrule-groups.yaml"  # what the operator hands Prometheus
    crd.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    _check(crd)
    assert rule["spec"]["groups"] == yaml.safe_load((written / "observability" / "rules.yaml").read_text())["groups"]
    assert board_cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (board_json,) = board_cm["data"].values()
    assert json.loads(board_json) == json.loads((written / "observability" / "dashboard.json").read_text())
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    # the shipped spec sets TTFT P99 1000 ms and TPOT P99 40 ms
    assert {"LLMTTFTP99BudgetBurn", "LLMITLP99OverSLO", "LLMRequestErrors", "LLMKVCacheNearlyFull"} <= alerts
    assert {"LLMDynamoSaturated", "LLMServerNotScraped", "LLMLatencyHistogramMissing"} <= alerts
    # rule-table rows over signals Dynamo does not record are left out, never written dead
    assert not alerts & {"LLMQueueTimeHigh", "LLMPrefillInterference", "LLMGPUUnderutilised", "LLMTPOTOverSLO"}


@pytest.mark.slow
@pytest.mark.validator
def test_toolchain_deploy_on_a_dynamo_spec_writes_them_too(tmp_path: Path) -> None:
    """`toolchain deploy` on a Dynamo spec shares the path: the alerts and dashboard come with its DGD as well."""
    from typer.testing import CliRunner

    from toolchain.cli.main import app

    out = tmp_path / "out"
    artifact = ["--engine", "ab" * 32, "--registry", "s3://models/llm", "--image", "registry.example/toolchain:1"]
    r = CliRunner().invoke(app, ["deploy", str(DISAGG), "--out", str(out), "--namespace", "llm", *artifact])
    assert r.exit_code == 0, r.output
    kinds = {res["kind"] for res in render_kustomization(out)}
    assert {"DynamoGraphDeployment", "PrometheusRule", "ConfigMap", "NetworkPolicy"} == kinds
    _check(out / "observability" / "rules.yaml")
    assert (out / "observability" / "dashboard.json").is_file()


def test_every_selector_is_scoped_to_the_deployment(written: Path) -> None:
    groups = yaml.safe_load((written / "observability" / "rules.yaml").read_text())["groups"]
    board = json.loads((written / "observability" / "dashboard.json").read_text())
    exprs = [r["expr"] for g in groups for r in g["rules"]] + [t["expr"] for p in board["panels"] for t in p["targets"]]
    sels = re.findall(r"\b(?:dynamo_|up\b|toolchain:)[a-zA-Z0-9_:]*\{([^}]*)\}", "\n".join(exprs))
    assert len(sels) > 30
    for sel in sels:  # the operator's Dynamo namespace for the DGD is <namespace>-<name>
        assert 'dynamo_namespace="llm-llama-3-3-70b-instruct-fp8-dynamo-disagg"' in sel and 'namespace="llm"' in sel


def test_without_the_kv_router_there_is_no_kv_alert_to_go_dead(tmp_path: Path) -> None:
    """Round-robin routing: the frontend tracks no worker's KV blocks (measured on 1.6.1), so neither the KV signal
    nor the rule table's KV alert nor the KV panel is written; the KV router's deployment has all three."""
    from toolchain.dynamo.observability import dashboard, groups_of, scope_of
    from toolchain.dynamo.pipeline import plan_spec

    d = yaml.safe_load(DISAGG.read_text())
    d["dynamo"]["router"] = "round-robin"
    spec = tmp_path / "rr.yaml"
    spec.write_text(yaml.safe_dump(d, sort_keys=False))
    for path, kv in ((spec, False), (DISAGG, True)):
        p = plan_spec(path, estimator="floor")
        scope = scope_of("app", "llm", MODEL)
        rules = [r for g in groups_of(p.cell, p.plan, scope) for r in g["rules"]]
        panels = {x["title"] for x in dashboard(p.cell, p.plan, scope, title="t")["panels"]}
        assert any(r.get("record") == "toolchain:kv_usage:max" for r in rules) is kv
        assert any(r.get("alert") == "LLMKVCacheNearlyFull" for r in rules) is kv
        assert ("KV cache per pool" in panels) is kv
        assert any(r.get("alert") == "LLMRequestErrors" for r in rules)  # the rest is there either way


# ---------------------------------------------------------------- promtool test rules

FE = f'namespace="llm",dynamo_namespace="llm-app",pod="app-frontend-0",model="{MODEL}"'
WORKER = 'namespace="llm",dynamo_namespace="llm-app",pod="app-{role}-0",worker_id="{role}-0",worker_type="{role}"'
_REF = json.loads(REFERENCE.read_text())["families"]
TTFT_LE = _REF["dynamo_frontend_time_to_first_token_seconds"]["buckets"]
ITL_LE = _REF["dynamo_frontend_inter_token_latency_seconds"]["buckets"]


def _counter(per_step: float, n: int) -> str:
    return f"0+{per_step:g}x{n}"


def _hist(name: str, bounds: list[str], shares: dict[float, float], per_min: float, n: int) -> list[tuple[str, str]]:
    """Cumulative bucket series of a histogram that sees ``per_min`` observations a minute, ``shares`` of them at
    each value (seconds)."""
    out = []
    for le in bounds:
        top = float("inf") if le == "+Inf" else float(le)
        inc = per_min * sum(sh for v, sh in shares.items() if v <= top)
        out.append((f'{name}_bucket{{{FE},le="{le}"}}', _counter(inc, n)))
    out.append((f"{name}_count{{{FE}}}", _counter(per_min, n)))
    return out


def _series(
    minutes: int = 120,
    *,
    ttft_bad: float = 0.0,  # share of first tokens at 1.5 s (over the 1000 ms target)
    itl_slow: float = 0.0,  # share of token gaps at 90 ms (over the 40 ms target)
    failed: float = 0.0,  # failed requests a minute
    decode_blocks: float = 4000,
    inflight: float = 10,
    up: int = 1,
) -> list[dict[str, str]]:
    """One Dynamo deployment's frontend series at 1 m steps, 600 requests a minute: healthy unless told otherwise."""
    s: list[tuple[str, str]] = [(f'up{{{FE.rsplit(",model", 1)[0]},instance="10.0.0.1:8000"}}', f"{up}x{minutes}")]
    if not up:
        return [{"series": k, "values": v} for k, v in s]
    s += _hist("dynamo_frontend_time_to_first_token_seconds", TTFT_LE, {0.2: 1 - ttft_bad, 1.5: ttft_bad}, 600, minutes)
    s += _hist(
        "dynamo_frontend_inter_token_latency_seconds", ITL_LE, {0.015: 1 - itl_slow, 0.09: itl_slow}, 6e4, minutes
    )
    s += [
        (f'dynamo_frontend_requests_total{{{FE},status="success"}}', _counter(600 - failed, minutes)),
        (f'dynamo_frontend_requests_total{{{FE},status="error",error_type="internal"}}', _counter(failed, minutes)),
        (f"dynamo_frontend_inflight_requests{{{FE}}}", f"{inflight:g}x{minutes}"),
        (f"dynamo_frontend_queued_requests{{{FE}}}", f"2x{minutes}"),
        (f"dynamo_frontend_model_total_kv_blocks{{{FE}}}", f"10000x{minutes}"),
        (f"dynamo_frontend_worker_active_decode_blocks{{{WORKER.format(role='prefill')}}}", f"500x{minutes}"),
        (
            f"dynamo_frontend_worker_active_decode_blocks{{{WORKER.format(role='decode')}}}",
            f"{decode_blocks:g}x{minutes}",
        ),
    ]
    return [{"series": k, "values": v} for k, v in s]


BY = {"namespace": "llm", "dynamo_namespace": "llm-app"}
HIST_MISSING = {"alertname": "LLMLatencyHistogramMissing", **BY, "model": MODEL}
# scenario: (series, eval minute, the alerts that fire: (alertname, severity or window, extra output labels))
SCENARIOS: dict[str, tuple[list[dict[str, str]], int, set[tuple[str, str, tuple[tuple[str, str], ...]]]]] = {
    "healthy": (_series(), 100, set()),
    # 0.5 % of first tokens over the target: half the P99 budget, no page and no ticket
    "ttft-within-budget": (_series(ttft_bad=0.005), 100, set()),
    # 20 % over the target for 2 h: every window burns faster than its rate
    "ttft-over-slo": (
        _series(ttft_bad=0.2),
        100,
        {("LLMTTFTP99BudgetBurn", w, ()) for w in ("1h", "6h", "1d", "3d")},
    ),
    "itl-over-tpot-target": (_series(itl_slow=0.05), 100, {("LLMITLP99OverSLO", "warning", ())}),
    "errors": (_series(failed=30), 100, {("LLMRequestErrors", "critical", ())}),
    "kv-decode-nearly-full": (
        _series(decode_blocks=9000),
        100,
        {("LLMKVCacheNearlyFull", "warning", (("worker_type", "decode"),))},
    ),
    "kv-decode-full": (
        _series(decode_blocks=9700),
        100,
        {("LLMKVCacheNearlyFull", s, (("worker_type", "decode"),)) for s in ("warning", "critical")},
    ),
    "saturated": (_series(inflight=10_000), 100, {("LLMDynamoSaturated", "warning", ())}),
    "not-scraped": (
        _series(up=0),
        100,
        {("LLMServerNotScraped", "critical", ()), ("LLMLatencyHistogramMissing", "warning", ())},
    ),
}


def _one_group(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules without annotations in one group, recording rules before the alerts that read them (promtool
    compares annotations verbatim; `promtool check rules` checks their templates)."""
    rules = [{k: v for k, v in r.items() if k != "annotations"} for g in groups for r in g["rules"]]
    return [{"name": "toolchain.app.all", "rules": rules}]


def _key(rule: dict[str, Any]) -> tuple[str, str]:
    return rule["alert"], rule["labels"].get("long_window") or rule["labels"]["severity"]


def _output_labels(rule: dict[str, Any]) -> dict[str, str]:
    if rule["expr"].startswith("absent("):
        inner = rule["expr"][len("absent(") : -1]
        return {} if "==" in inner else dict(re.findall(r'([a-z_]+)="([^"]*)"', inner))
    out = dict(BY)
    if rule["labels"].get("slo") and "BudgetBurn" in rule["alert"]:
        out["slo"] = rule["labels"]["slo"]  # the error-ratio records carry it
    return out


def _tests(groups: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    rules = [r for g in groups for r in g["rules"] if "alert" in r]
    tests = []
    for name in names:
        series, at, firing = SCENARIOS[name]
        fires = {(a, k): dict(extra) for a, k, extra in firing}
        checks = []
        for alert in sorted({r["alert"] for r in rules}):
            exp = [
                {"exp_labels": {**r["labels"], **_output_labels(r), **fires[_key(r)]}}
                for r in rules
                if r["alert"] == alert and _key(r) in fires
            ]
            checks.append({"eval_time": f"{at}m", "alertname": alert, "exp_alerts": exp})
        tests.append({"name": name, "interval": "1m", "input_series": series, "alert_rule_test": checks})
    return tests


@pytest.mark.slow
@pytest.mark.validator
def test_each_alert_fires_on_its_symptom_and_only_there(planned: Any, tmp_path: Path) -> None:
    groups = _one_group(_groups(planned))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": _tests(groups, list(SCENARIOS))}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    r = run([tool("promtool"), "test", "rules", "test.yaml"], cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    covered = {(a, k) for f in SCENARIOS.values() for a, k, _ in f[2]}
    alerts = {_key(r) for g in groups for r in g["rules"] if "alert" in r}
    assert alerts == covered  # every alert fires in some scenario


@pytest.mark.slow
@pytest.mark.validator
def test_the_ttft_scenario_can_fail(planned: Any, tmp_path: Path) -> None:
    """The same harness expecting the TTFT page on the within-budget series fails: the alert really stays silent."""
    groups = _one_group(_groups(planned))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = _tests(groups, ["ttft-over-slo"])
    tests[0]["input_series"] = SCENARIOS["ttft-within-budget"][0]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": tests}))
    r = run([tool("promtool"), "test", "rules", "test.yaml"], cwd=tmp_path)
    assert r.returncode != 0 and "LLMTTFTP99BudgetBurn" in r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.validator
@pytest.mark.parametrize(("target_ms", "bad"), [(1000.0, 0.3), (600.0, 0.3 + 0.4 * (1 - 130 / 530)), (100.0, 1.0)])
def test_ttft_error_ratio_reads_the_frontend_buckets_in_seconds(
    planned: Any, tmp_path: Path, target_ms: float, bad: float
) -> None:
    """100 first tokens a minute: 30 at 0.3 s, 40 at 0.8 s, 30 at 1.5 s. A target on a bucket bound (1 s) counts
    the buckets; one between bounds (0.6 s, between 0.47 and 1) is interpolated as histogram_quantile does."""
    from toolchain.deploy.observability import Slo, slo_groups
    from toolchain.dynamo.observability import DYNAMO, scope_of

    groups = slo_groups(scope_of("app", "llm", MODEL), [Slo("ttft", 99, target_ms)], DYNAMO)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    series = _hist("dynamo_frontend_time_to_first_token_seconds", TTFT_LE, {0.3: 0.3, 0.8: 0.4, 1.5: 0.3}, 100, 30)
    test = {
        "rule_files": ["rules.yaml"],
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in series],
                "promql_expr_test": [
                    {
                        "expr": 'round(1000 * toolchain:slo_ttft_p99:error_ratio_rate5m{dynamo_namespace="llm-app"})',
                        "eval_time": "20m",
                        "exp_samples": [
                            {
                                "labels": '{dynamo_namespace="llm-app",namespace="llm",slo="ttft_p99"}',
                                "value": round(1000 * bad),
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    r = run([tool("promtool"), "test", "rules", "test.yaml"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- dashboard


def test_dashboard_has_what_grafana_import_needs_and_shows_the_slos(written: Path) -> None:
    board = json.loads((written / "observability" / "dashboard.json").read_text())
    check_grafana_import(board)
    assert "dynamo" in board["tags"]
    panels = {p["title"]: p for p in board["panels"]}

    def lines(title: str) -> list[float | None]:
        return [s["value"] for s in panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]]

    assert lines("TTFT (frontend)") == [None, 1000.0]  # the spec's TTFT P99 target
    itl = lines("Inter-token latency (frontend)")
    assert itl[0] is None and itl[-1] == 40.0 and len(itl) == 3  # the plan's decode step, then the TPOT target
    assert lines("KV cache per pool") == [None, 0.8, 0.95]  # the rule table's
    kv = panels["KV cache per pool"]["targets"][0]
    assert kv["legendFormat"] == "{{worker_type}}"  # one line per pool: prefill, decode
    assert set(panels) >= {"Requests", "In flight and queued", "Worker requests per pool", "TTFT P99 error budget burn"}


@pytest.mark.slow
@pytest.mark.validator
def test_every_dashboard_expression_parses(written: Path, tmp_path: Path) -> None:
    board = json.loads((written / "observability" / "dashboard.json").read_text())
    rules = [
        {"record": f"dashboard:expr_{i}:check", "expr": t["expr"]}
        for i, t in enumerate(t for p in board["panels"] for t in p["targets"])
    ]
    f = tmp_path / "dashboard-exprs.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    _check(f)


# ---------------------------------------------------------------- metric names exist


def _exprs(written: Path) -> tuple[list[str], set[str]]:
    groups = yaml.safe_load((written / "observability" / "rules.yaml").read_text())["groups"]
    board = json.loads((written / "observability" / "dashboard.json").read_text())
    exprs = [r["expr"] for g in groups for r in g["rules"]] + [t["expr"] for p in board["panels"] for t in p["targets"]]
    return exprs, {r["record"] for g in groups for r in g["rules"] if "record" in r}


def _selectors(exprs: list[str]) -> list[tuple[str, dict[str, str]]]:
    found = re.findall(r"\b([a-zA-Z_][a-zA-Z0-9_:]*)\{([^}]*)\}", "\n".join(exprs))
    return [(name, dict(re.findall(r'([a-zA-Z_]+)=~?"([^"]*)"', sel))) for name, sel in found]


def _family(name: str, families: dict[str, Any]) -> str | None:
    if name in families:
        return name
    for suffix in ("_bucket", "_count", "_sum"):
        base = name.removesuffix(suffix)
        if name.endswith(suffix) and families.get(base, {}).get("kind") == "histogram":
            return base
    return None


def metric_problems(exprs: list[str], recorded: set[str], families: dict[str, Any]) -> list[str]:
    """Every series a rule or panel reads is a family Dynamo serves (not one only the mocker writes), with the
    labels it matches on; every ``toolchain:*`` series is recorded."""
    bad = []
    for name, labels in _selectors(exprs):
        if name.startswith("toolchain:"):
            if name not in recorded:
                bad.append(f"{name} is read but never recorded")
            continue
        if name == "up":
            continue  # Prometheus's own target health
        fam = _family(name, families)
        if fam is None or families[fam].get("stand_in_only"):
            bad.append(f"{name} is not a metric Dynamo 1.6.1 serves")
            continue
        unknown = set(labels) - SCOPE_LABELS - {"le"} - set(families[fam]["labels"])
        if unknown:
            bad.append(f"{name} has no label {sorted(unknown)}")
    return bad


def test_every_metric_in_a_rule_or_panel_is_one_dynamo_serves(written: Path) -> None:
    exprs, recorded = _exprs(written)
    assert metric_problems(exprs, recorded, _REF) == []
    seen = {_family(n, _REF) for n, _ in _selectors(exprs)}
    assert {
        "dynamo_frontend_time_to_first_token_seconds",
        "dynamo_frontend_inter_token_latency_seconds",
        "dynamo_frontend_requests_total",
        "dynamo_frontend_worker_active_decode_blocks",
        "dynamo_component_requests_total",
    } <= seen


def test_the_check_notices_a_renamed_metric_or_label(written: Path) -> None:
    exprs, recorded = _exprs(written)
    renamed = [e.replace("dynamo_frontend_inter_token_latency_seconds", "dynamo_frontend_itl_seconds") for e in exprs]
    assert any("dynamo_frontend_itl_seconds_bucket" in p for p in metric_problems(renamed, recorded, _REF))
    relabelled = [e.replace('status="error"', 'outcome="error"') for e in exprs]
    assert any("outcome" in p for p in metric_problems(relabelled, recorded, _REF))
    mocker_only = ['trtllm:kv_cache_usage_perc{namespace="llm"}']  # the stand-in's name, not dynamo.trtllm's
    assert metric_problems(mocker_only, recorded, _REF) == [
        "trtllm:kv_cache_usage_perc is not a metric Dynamo 1.6.1 serves"
    ]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(300)
def test_every_series_a_rule_reads_is_on_a_live_scrape(written: Path, tmp_path: Path) -> None:
    """The frontend and the mocker workers (stand-in for dynamo.trtllm) of the spec's topology, on 127.0.0.1: after
    two streamed requests every frontend and worker series the rules and panels read is on their /metrics."""
    from tests.dynamo.conftest import dynamo_python_or_fail
    from toolchain.bench.samples import parse
    from toolchain.dynamo.pipeline import up

    dynamo_python_or_fail()
    d = yaml.safe_load(DISAGG.read_text())
    d["dynamo"].update(prefill={"tp": 2, "replicas": 1}, decode={"tp": 2, "replicas": 1})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(d, sort_keys=False))
    _planned, started = up(spec, workdir=tmp_path / "run")
    dep: Any = started
    try:
        for _ in range(2):
            body = {"model": dep.model, "messages": [{"role": "user", "content": "hi " * 300}], "max_tokens": 8}
            req = urllib.request.Request(
                dep.url + "/v1/chat/completions",
                json.dumps({**body, "stream": True}).encode(),
                {"content-type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
        names = set()
        for url in dep.metrics_urls:
            with urllib.request.urlopen(url, timeout=10) as r:
                names |= {s.name for s in parse(r.read().decode()).samples}
    finally:
        dep.stop()
    exprs, _recorded = _exprs(written)
    read = {n for n, _ in _selectors(exprs) if not n.startswith("toolchain:") and n != "up"}
    assert len(read) >= 8
    assert read - names == set()  # status="error" series appear only on a failure: the family is there
