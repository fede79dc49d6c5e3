"""`toolchain dynamo deploy`: the DynamoGraphDeployment validates offline against the recorded v1beta1 CRD schema
(crd_schemas/dynamographdeployment.json, source named inside) with its pod templates as strict core
PodTemplateSpecs, and carries what the plan and the spec say."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from tests.deploy.conftest import render_kustomization

pytestmark = pytest.mark.slow  # each test plans the 70B Dynamo spec with AIConfigurator's database

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from toolchain.cli.main import app

    out = tmp_path_factory.mktemp("dgd") / "out"
    r = CliRunner().invoke(
        app, ["dynamo", "deploy", str(DISAGG), "--out", str(out), "--namespace", "llm", "--allow-unquantized"]
    )
    assert r.exit_code == 0, r.output
    return out


def _dgd(out: Path) -> dict[str, Any]:
    d: dict[str, Any] = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return d


def test_every_manifest_validates(written: Path, validate_manifest: Callable[[dict[str, Any]], None]) -> None:
    resources = render_kustomization(written)
    assert {r["kind"] for r in resources} == {"ConfigMap", "DynamoGraphDeployment", "NetworkPolicy", "PrometheusRule"}
    for res in resources:
        validate_manifest(res)


def test_the_schema_catches_what_the_operator_refuses(
    validate_manifest: Callable[[dict[str, Any]], None], written: Path
) -> None:
    good = _dgd(written)
    validate_manifest(good)
    breakers: tuple[Callable[[dict[str, Any]], None], ...] = (
        lambda d: d["spec"]["components"][1].__setitem__("type", "router"),  # not a component type
        lambda d: d["spec"].__setitem__("backendFramework", "tensorrt"),
        lambda d: d["spec"]["components"][1].__setitem__("replicaCount", 2),  # unknown field
        lambda d: d["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0].__setitem__("gpus", 2),
        lambda d: d["spec"]["components"][1].__setitem__("name", "Prefill_Workers"),
    )
    for broken in breakers:
        d = copy.deepcopy(good)
        broken(d)
        with pytest.raises(Exception, match=r"is not one of|unexpected|does not match"):
            validate_manifest(d)


def test_components_and_sizing_follow_the_plan(written: Path) -> None:
    from toolchain.dynamo.pipeline import plan_spec

    plan = plan_spec(DISAGG, estimator="auto").plan  # what `dynamo deploy` sizes by default
    d = _dgd(written)
    assert d["apiVersion"] == "nvidia.com/v1beta1" and d["kind"] == "DynamoGraphDeployment"
    assert d["spec"]["backendFramework"] == "trtllm"
    comps = {c["name"]: c for c in d["spec"]["components"]}
    assert [c["type"] for c in d["spec"]["components"]] == ["frontend", "prefill", "decode"]
    for role in ("prefill", "decode"):
        c = comps[role]
        main = c["podTemplate"]["spec"]["containers"][0]
        assert main["name"] == "main"
        assert main["image"] == "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"
        assert c["replicas"] == plan.pool(role).replicas
        assert main["resources"]["limits"]["nvidia.com/gpu"] == str(plan.pool(role).tp)
        assert main["command"] == ["python3"] and main["args"][:2] == ["-m", "dynamo.trtllm"]
        i = main["args"].index("--disaggregation-mode")
        assert main["args"][i + 1] == role
    fe = comps["frontend"]["podTemplate"]["spec"]["containers"][0]
    assert fe["args"][:2] == ["-m", "dynamo.frontend"] and "kv" in fe["args"]


# The label the Dynamo operator puts on every pod of a graph, valued with the DynamoGraphDeployment's name
# (docs/dynamo.md, "NetworkPolicy": ai-dynamo/dynamo deploy/operator consts.go KubeLabelDynamoGraphDeploymentName)
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"


def test_a_network_policy_selects_the_graphs_pods(written: Path) -> None:
    """Ingress to the frontend's HTTP port and the system port (metrics, health) from anywhere, everything from
    the graph's own pods; egress left open (NATS, etcd, the registry are elsewhere)."""
    (policy,) = [r for r in render_kustomization(written) if r["kind"] == "NetworkPolicy"]
    d = _dgd(written)
    graph = {"matchLabels": {GRAPH_LABEL: d["metadata"]["name"]}}
    assert policy["metadata"]["namespace"] == d["metadata"]["namespace"] == "llm"
    assert policy["spec"]["podSelector"] == graph and policy["spec"]["policyTypes"] == ["Ingress"]
    served, peers = policy["spec"]["ingress"]
    (fe,) = [c for c in d["spec"]["components"] if c["type"] == "frontend"]
    args = fe["podTemplate"]["spec"]["containers"][0]["args"]
    http = int(args[args.index("--http-port") + 1])
    assert fe["podTemplate"]["spec"]["containers"][0]["ports"] == [{"name": "http", "containerPort": http}]
    assert "from" not in served and served["ports"] == [
        {"protocol": "TCP", "port": http},
        {"protocol": "TCP", "port": 9090},  # the operator's system port (DYN_SYSTEM_PORT): /metrics, /health
    ]
    assert peers == {"from": [{"podSelector": graph}]}


def test_restricted_pod_security(written: Path) -> None:
    for c in _dgd(written)["spec"]["components"]:
        pod = c["podTemplate"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for ctr in pod["containers"]:
            sc = ctr["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]


def test_engine_args_per_pool(written: Path) -> None:
    cm = yaml.safe_load((written / "configmap.yaml").read_text())
    pre, dec = yaml.safe_load(cm["data"]["prefill.yaml"]), yaml.safe_load(cm["data"]["decode.yaml"])
    for opts in (pre, dec):
        assert opts["backend"] == "pytorch"
        assert opts["cache_transceiver_config"] == {"backend": "NIXL"}
        assert opts["enable_chunked_prefill"] is True
        assert (
            opts["kv_cache_config"]["enable_block_reuse"] is True and opts["kv_cache_config"]["tokens_per_block"] == 32
        )
        assert opts["cuda_graph_config"]["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]
        assert opts["tensor_parallel_size"] == 2
    assert pre["disable_overlap_scheduler"] is True  # no overlap scheduler on prefill-only workers
    assert "disable_overlap_scheduler" not in dec


def test_local_model_without_model_path_is_a_one_line_error(cli: Cli, tmp_path: Path) -> None:
    d = yaml.safe_load(DISAGG.read_text())
    d["model"] = {"source": "./ckpt", "architecture": "llama-3.3-70b"}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(d))
    r = cli("dynamo", "deploy", spec, "--out", tmp_path / "out", "--allow-unquantized")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("Error: ") and "--model-path" in r.output and len(r.output.strip().splitlines()) == 1


KEY = "ab" * 32


def test_registry_artifact_is_pulled_and_verified_by_an_init_container(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    out = tmp_path / "out"
    r = cli(
        "dynamo", "deploy", DISAGG, "--out", out, "--engine", KEY, "--registry", "s3://models/llm",
        "--registry-secret", "registry-creds", "--toolchain-image", "registry.example/toolchain@sha256:" + "0" * 64,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    # no credentials for s3://models/llm here: written unpinned, and said in one line
    assert len([ln for ln in r.stderr.splitlines() if "is not pinned" in ln]) == 1, r.stderr
    for res in render_kustomization(out):
        validate_manifest(res)
    for c in _dgd(out)["spec"]["components"][1:]:
        pod = c["podTemplate"]["spec"]
        init, check = pod["initContainers"]  # the pull, then the bundle's check against the pool's GPU
        assert check["name"] == "bundle-check" and "--quarantine" in check["args"]
        assert init["command"][-4:] == ["cache", "pull", KEY, f"/models/{KEY}"]
        assert init["args"] == ["--registry", "s3://models/llm"]
        assert init["envFrom"] == [{"secretRef": {"name": "registry-creds", "optional": False}}]
        main = pod["containers"][0]
        assert main["args"][main["args"].index("--model") + 1] == f"/models/{KEY}/hf"
        assert {"name": "models", "emptyDir": {}} in pod["volumes"]


def test_registry_mistakes_are_one_line_errors(cli: Cli, tmp_path: Path) -> None:
    cases = [
        (["--engine", KEY], "--engine needs --registry"),
        (["--engine", KEY, "--registry", str(tmp_path), "--toolchain-image", "t:1"], "a path of this machine"),
        (["--engine", KEY, "--registry", "ftp://b/p", "--toolchain-image", "t:1"], "is not s3://, hf:// or oci://"),
        (["--engine", KEY, "--registry", "s3://b/p", "--toolchain-image", "t:1", "--model-path", "/m"], "both name"),
    ]
    for i, (args, msg) in enumerate(cases):
        r = cli("dynamo", "deploy", DISAGG, "--out", tmp_path / f"o{i}", *args)
        assert r.exit_code == 2, r.output
        assert r.output.startswith("Error: ") and msg in r.output and len(r.output.strip().splitlines()) == 1
