"""The Dynamo deployment shares the deploy core with the Triton one (issue 38, item 2): names Kubernetes accepts,
the registry schemes the pull step reads, the restricted pod security, and `toolchain deploy` on a Dynamo spec
writes its DynamoGraphDeployment instead of a single-pool deployment."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from tests.deploy.conftest import render_kustomization

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
KEY = "cd" * 32
IMAGE = "registry.example/toolchain@sha256:" + "0" * 64
# A DNS-1035 label, as Kubernetes' apimachinery validates Service names (pkg/util/validation: IsDNS1035Label,
# "[a-z]([-a-z0-9]*[a-z0-9])?", at most 63 characters): the Dynamo operator names Services after the deployment.
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _renamed(tmp_path: Path, name: str) -> Path:
    d = yaml.safe_load(DISAGG.read_text())
    d["name"] = name
    out = tmp_path / "spec.yaml"
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def _dgd(out: Path) -> dict[str, Any]:
    d: dict[str, Any] = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return d


@pytest.mark.slow
def test_any_spec_name_gives_names_kubernetes_accepts(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    # a name the spec accepts (lowercase, digits, '.', '_', '-', up to 80) that starts with a digit and is long
    spec = _renamed(tmp_path, "3.3-70b_llama.instruct-fp8-disaggregated-prefill-decode-for-the-prod-cluster")
    out = tmp_path / "out"
    r = cli("dynamo", "deploy", spec, "--out", out, "--allow-unquantized")
    assert r.exit_code == 0, r.output
    for res in render_kustomization(out):
        validate_manifest(res)
        name = res["metadata"]["name"]
        assert DNS1035.fullmatch(name) and len(name) <= 63, name
    d = _dgd(out)
    assert "3-3-70b-llama-instruct" in d["metadata"]["name"]
    for comp in d["spec"]["components"]:  # the operator's Service names: <deployment>-<component>
        assert len(f"{d['metadata']['name']}-{comp['name']}") <= 63


@pytest.mark.slow
def test_an_oci_registry_is_one_the_pods_can_pull_from(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    reg = "oci://registry.example.com/engines/llama"
    r = cli("dynamo", "deploy", DISAGG, "--out", out, "--engine", KEY, "--registry", reg, "--toolchain-image", IMAGE)
    assert r.exit_code == 0, r.output
    for comp in _dgd(out)["spec"]["components"][1:]:
        init, check = comp["podTemplate"]["spec"]["initContainers"]
        assert init["args"] == ["--registry", reg]
        # the pulled warm-start bundle is checked against the pool's GPU and the image's TensorRT-LLM before the
        # worker, pointed at its caches, starts: a bundle made for anything else starts cold
        assert check["command"] == ["python3", "-m", "toolchain.artifacts.bundle", f"/models/{KEY}"]
        assert check["args"] == ["--gpu", "NVIDIA H100 80GB HBM3", "--trtllm", "1.3.0rc29", "--quarantine"]
        env = {e["name"]: e["value"] for e in comp["podTemplate"]["spec"]["containers"][0]["env"]}
        assert env["TLLM_AUTOTUNER_CACHE_PATH"] == f"/models/{KEY}/caches/autotuner.cache"


@pytest.mark.slow
def test_pod_security_is_the_deploy_cores(cli: Cli, tmp_path: Path) -> None:
    from toolchain.deploy import core

    out = tmp_path / "out"
    assert cli("dynamo", "deploy", DISAGG, "--out", out, "--allow-unquantized").exit_code == 0
    for comp in _dgd(out)["spec"]["components"]:
        spec = comp["podTemplate"]["spec"]
        assert spec["securityContext"] == core.pod_security()
        assert spec["containers"][0]["securityContext"] == core.container_security()


@pytest.mark.slow
def test_toolchain_deploy_on_a_dynamo_spec_writes_the_dynamo_deployment(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["--engine", KEY, "--registry", "s3://models/llm", "--registry-secret", "creds"]
    r = cli("deploy", DISAGG, "--out", a, *common, "--image", IMAGE)
    assert r.exit_code == 0, r.output
    r2 = cli("dynamo", "deploy", DISAGG, "--out", b, *common, "--toolchain-image", IMAGE)
    assert r2.exit_code == 0, r2.output
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for name in ("dynamographdeployment.yaml", "configmap.yaml", "kustomization.yaml"):
        assert (a / name).read_text() == (b / name).read_text(), name
    for res in render_kustomization(a):
        validate_manifest(res)
    dry = cli("deploy", DISAGG, "--dry-run")
    assert dry.exit_code == 0 and "DynamoGraphDeployment" in dry.output and "decode:" in dry.output, dry.output


def test_toolchain_deploy_refuses_triton_only_flags_on_a_dynamo_spec(cli: Cli, tmp_path: Path) -> None:
    r = cli("deploy", DISAGG, "--out", tmp_path / "o", "--frontend", "openai", "--min-replicas", "2")
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "--frontend, --min-replicas" in lines[0] and "NVIDIA Dynamo" in lines[0]
    assert not (tmp_path / "o").exists()
