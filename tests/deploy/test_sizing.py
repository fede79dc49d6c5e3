"""Replica counts, GPUs per pod, /dev/shm and probe budgets against the planner, for every shipped spec."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.deploy.conftest import HERE, SHIPPED
from tests.helpers import deploy_target
from toolchain.deploy.manifests import manifests
from toolchain.deploy.sizing import GIB, size_cell
from toolchain.errors import DeployError
from toolchain.hardware.catalog import CATALOG
from toolchain.planning.plan import plan_cell
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand

CELLS = [(spec, cell) for spec in SHIPPED for cell in expand(load_spec(spec))]


@pytest.mark.parametrize(("spec", "cell"), CELLS, ids=[f"{s.stem}:{c.id}" for s, c in CELLS])
def test_pods_and_fleet_follow_the_planner(spec: Path, cell: Cell) -> None:
    plan = plan_cell(cell, arch_for_spec(cell.spec, allow_network=False))
    s = size_cell(cell, plan)
    fleet = plan.fleet
    assert fleet is not None, "every shipped spec has traffic and an SLO"
    ranks = cell.tp * cell.pp
    assert s.gpus_per_replica == ranks
    # instances, not GPUs: the planner's totals divided by the GPUs of one instance
    assert s.max_replicas == fleet["total_instances"] == fleet["total_gpus"] // ranks
    assert s.min_replicas == math.ceil(round(fleet["raw_instances"], 9))
    assert s.shm_bytes == (ranks + 1) * GIB
    work = manifests(deploy_target(), cell, s)["deployment.yaml"]
    pod = work["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(ranks)
    assert work["spec"]["replicas"] == s.min_replicas
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": f"{ranks + 1}Gi"}
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == s.startup_budget_s
    # the budget covers at least pulling the engine at the assumed rate and loading one rank
    assert s.startup_budget_s >= plan.weight_bytes_total / 250e6 + plan.weight_bytes_per_gpu / 1e9
    so = manifests(deploy_target(), cell, s)["scaledobject.yaml"]["spec"]
    assert (so["minReplicaCount"], so["maxReplicaCount"]) == (s.min_replicas, s.max_replicas)


def test_70b_tp2_gets_two_gpu_pods_counted_in_instances() -> None:
    (cell,) = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h100.yaml")))
    plan = plan_cell(cell, arch_for_spec(cell.spec, allow_network=False))
    s = size_cell(cell, plan)
    assert cell.tp == 2 and s.gpus_per_replica == 2 and not s.multi_node
    assert plan.fleet is not None
    assert s.max_replicas * 2 == plan.fleet["total_gpus"]  # 12 GPUs → 6 pods of 2
    assert s.max_replicas != plan.fleet["total_gpus"]
    assert s.shm_bytes == 3 * GIB


def test_startup_budget_grows_with_the_engine() -> None:
    small = expand(load_spec(Path("engine_specs/mistral-7b-int4-awq.yaml")))[0]
    big = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h200.yaml")))[0]
    sizes = [size_cell(c, plan_cell(c, arch_for_spec(c.spec, allow_network=False))) for c in (small, big)]
    assert sizes[0].engine_bytes_total < sizes[1].engine_bytes_total
    assert sizes[0].startup_budget_s < sizes[1].startup_budget_s


def test_a_replica_wider_than_a_node_is_a_leaderworkerset() -> None:
    (cell,) = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h100.yaml")))
    s = size_cell(cell, plan_cell(cell, arch_for_spec(cell.spec, allow_network=False)), gpus_per_node=1)
    assert s.multi_node and s.nodes_per_replica == 2
    res = manifests(deploy_target(), cell, s)
    lws = res["leaderworkerset.yaml"]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert res["scaledobject.yaml"]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    group = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]
    assert leader["containers"][0]["args"] == ["leader"] and worker["containers"][0]["args"] == ["worker"]
    assert leader["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"  # one node's GPUs per pod
    assert s.shm_bytes == 2 * GIB  # /dev/shm for the one rank each pod holds, not for the whole group (3 GiB)
    assert "startupProbe" in leader["containers"][0] and "startupProbe" not in worker["containers"][0]
    # only the leader talks to the API (kubessh): the workers mount no service-account token
    assert leader["serviceAccountName"] == "app" and leader["automountServiceAccountToken"] is True
    assert "serviceAccountName" not in worker and worker["automountServiceAccountToken"] is False
    # the PodDisruptionBudget covers every pod of every group, leaders and workers
    sel = res["pdb.yaml"]["spec"]["selector"]["matchLabels"]
    for tmpl in (group["leaderTemplate"], group["workerTemplate"]):
        assert sel.items() <= tmpl["metadata"]["labels"].items()
    role = res["role.yaml"]
    assert {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]} in role["rules"]
    assert res["rolebinding.yaml"]["subjects"] == [{"kind": "ServiceAccount", "name": "app"}]
    assert list(res)[:3] == ["serviceaccount.yaml", "role.yaml", "rolebinding.yaml"]


def test_overrides_and_bad_ranges() -> None:
    (cell,) = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h200.yaml")))
    plan = plan_cell(cell, arch_for_spec(cell.spec, allow_network=False))
    s = size_cell(cell, plan, min_replicas=2, max_replicas=3)
    assert (s.min_replicas, s.max_replicas) == (2, 3)
    with pytest.raises(DeployError):
        size_cell(cell, plan, min_replicas=5, max_replicas=3)
    with pytest.raises(DeployError):
        size_cell(cell, plan, gpus_per_node=0)


def test_node_selector_is_the_gfd_product_label() -> None:
    seen = json.loads((HERE / "data" / "gfd_product_labels.json").read_text())["labels"]
    for name, rec in seen.items():
        assert CATALOG[name].gfd_product == rec["value"], name
    for gpu in CATALOG.values():  # every value is a valid label value
        assert len(gpu.gfd_product) <= 63 and all(ch.isalnum() or ch in "-_." for ch in gpu.gfd_product)


def test_autoscaler_bounds_cover_the_plans_gpus_when_the_silicon_estimate_sized_the_fleet() -> None:
    """The 70B H100 spec planned 24 GPUs on AIConfigurator's estimate (843 tok/s per TP2 instance at batch 32)
    while deploy wrote 2..3 replicas from the roofline floor's 4,505 tok/s (issue 46): one fleet figure now."""
    from toolchain.planning.estimate import fleet_at

    (cell,) = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h100.yaml")))
    plan = plan_cell(cell, arch_for_spec(cell.spec, allow_network=False))
    assert plan.fleet is not None
    plan.estimator = "aiconfigurator 0.12.0"
    plan.fleet_estimate = fleet_at(cell, plan, 32, 843.0, 1.0)  # the estimate's figure at the SLO batch
    s = size_cell(cell, plan)
    est = plan.fleet_estimate
    assert s.max_replicas * s.gpus_per_replica == est["total_gpus"] > plan.fleet["total_gpus"]
    assert s.min_replicas == math.ceil(round(est["raw_instances"], 9))
    assert s.replicas_source.startswith("silicon estimate (aiconfigurator 0.12.0)")
    so = manifests(deploy_target(), cell, s)["scaledobject.yaml"]["spec"]
    assert so["maxReplicaCount"] * s.gpus_per_replica >= est["total_gpus"]


def test_the_floor_sizes_only_where_no_estimate_exists_and_says_so() -> None:
    (cell,) = expand(load_spec(Path("engine_specs/llama-3.3-70b-fp8-h100.yaml")))
    plan = plan_cell(cell, arch_for_spec(cell.spec, allow_network=False))
    plan.no_estimate = "AIConfigurator is not installed"
    s = size_cell(cell, plan)
    assert plan.fleet is not None and s.max_replicas * s.gpus_per_replica == plan.fleet["total_gpus"]
    assert "roofline floor, a lower bound: no silicon estimate (AIConfigurator is not installed)" in s.replicas_source
