"""Every manifest validates offline against the pinned Kubernetes schema (core kinds) or the recorded CRD schema."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.conftest import KUBERNETES, SHIPPED
from tests.helpers import deploy_target
from toolchain.deploy.manifests import PINNED, kustomization, manifests, queue_query
from toolchain.deploy.sizing import size_cell
from toolchain.planning.plan import plan_cell
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

CELLS = [c for spec in SHIPPED for c in expand(load_spec(spec))]


def _all(cell: Any, **kw: Any) -> dict[str, dict[str, Any]]:
    s = size_cell(cell, plan_cell(cell, arch_for_spec(cell.spec, allow_network=False)), **kw)
    return manifests(deploy_target(), cell, s)


def test_pinned_version_is_the_one_checked() -> None:
    assert PINNED["kubernetes"] == KUBERNETES


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_every_resource_validates(cell: Any, validate_manifest: Callable[[dict[str, Any]], None]) -> None:
    res = _all(cell)
    assert {r["kind"] for r in res.values()} == {
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "ScaledObject",
        "NetworkPolicy",
    }
    for r in res.values():
        validate_manifest(r)
    k = kustomization(deploy_target(), list(res))
    assert k["resources"] == list(res)


def test_leaderworkerset_validates_with_its_pod_templates(validate_manifest: Callable[[dict[str, Any]], None]) -> None:
    (cell,) = expand(load_spec(SHIPPED[1]))  # the 70B TP2 spec, forced across nodes
    assert cell.tp == 2
    res = _all(cell, gpus_per_node=1)
    for r in res.values():
        validate_manifest(r)


def test_the_validators_reject_what_the_cluster_would(validate_manifest: Callable[[dict[str, Any]], None]) -> None:
    res = _all(CELLS[0])
    bad_dep = copy.deepcopy(res["deployment.yaml"])
    bad_dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["periodSecond"] = 10  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(bad_dep)
    bad_so = copy.deepcopy(res["scaledobject.yaml"])
    bad_so["spec"]["maxReplicas"] = 3  # the HPA spelling, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(bad_so)
    bad_sm = copy.deepcopy(res["servicemonitor.yaml"])
    bad_sm["spec"]["endpoints"][0]["interval"] = "fifteen"
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(bad_sm)
    lws = _all(expand(load_spec(SHIPPED[1]))[0], gpus_per_node=1)["leaderworkerset.yaml"]
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(lws)


def test_scaling_signal_is_the_diagnose_queue_time() -> None:
    from toolchain.diagnose.rules import QUEUE_MS

    res = _all(CELLS[0])
    (trigger,) = res["scaledobject.yaml"]["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    assert trigger["metadata"]["query"] == queue_query(deploy_target())
    q = trigger["metadata"]["query"]
    assert "nv_inference_queue_duration_us" in q and "nv_inference_request_success" in q and 'model="tensorrt_llm"' in q
    assert float(trigger["metadata"]["threshold"]) == QUEUE_MS


def test_service_exposes_what_the_monitor_scrapes() -> None:
    res = _all(CELLS[0])
    ports = {p["name"]: p["port"] for p in res["service.yaml"]["spec"]["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "openai": 9000}
    (ep,) = res["servicemonitor.yaml"]["spec"]["endpoints"]
    assert ep["port"] in ports and ep["path"] == "/metrics"
    (c,) = res["deployment.yaml"]["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert c["envFrom"] == [{"secretRef": {"name": "engine-registry", "optional": False}}]
    assert not any("secret" in e["name"].lower() or "token" in e["name"].lower() for e in c["env"])
