"""`toolchain deploy` output: complete, renderable, and free of host paths, secrets and `latest` tags."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli
from tests.deploy.conftest import render_kustomization
from toolchain.deploy import DeployOptions
from toolchain.errors import DeployError
from toolchain.pipeline.fleet import deploy_cell
from toolchain.specs.loader import load_spec

SECRET = "s3cr3t-VALUE-that-must-never-be-written"


@pytest.fixture(scope="module")
def written(tiny_spec_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deploy") / "out"
    mp = pytest.MonkeyPatch()
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "HF_TOKEN", "AWS_SESSION_TOKEN"):
        mp.setenv(var, SECRET)
    try:
        deploy_cell(
            load_spec(tiny_spec_file),
            cell_id=None,
            out=out,
            options=DeployOptions(registry="s3://engines/prod", registry_secret="engine-registry", namespace="llm"),
        )
    finally:
        mp.undo()
    return out


def test_layout(written: Path) -> None:
    for rel in (
        "deploy.json",
        "image/Dockerfile",
        "image/entrypoint.sh",
        "image/model_repository/tensorrt_llm/config.pbtxt",
        "image/model_repository/toolchain-repo.json",
        "image/model_repository/preprocessing/tokenizer/tokenizer.json",
        "image/src/pyproject.toml",
        "image/src/toolchain/deploy/entrypoint.sh",
        "k8s/kustomization.yaml",
        "k8s/deployment.yaml",
    ):
        assert (written / rel).is_file(), rel
    assert os.access(written / "image/entrypoint.sh", os.X_OK)
    meta = json.loads((written / "image/model_repository/toolchain-repo.json").read_text())
    assert meta["engine_key"] == json.loads((written / "deploy.json").read_text())["engine_key"]


@pytest.mark.slow
def test_the_image_installs_the_same_package_as_the_wheel(written: Path, tmp_path: Path) -> None:
    """pip builds the image's toolchain from image/src: that build holds every file of the checkout's package
    (before: setup.py and triton_repo/ were not copied, so the image's toolchain had no Triton model sources)."""
    import subprocess
    import sys
    import zipfile

    src = written / "image" / "src"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    names = set(zipfile.ZipFile(next(tmp_path.glob("toolchain-*.whl"))).namelist())
    repo = Path(__file__).resolve().parents[2]
    want = {f"toolchain/{p.relative_to(repo / 'toolchain')}" for p in (repo / "toolchain").rglob("*.py")}
    want |= {
        f"toolchain/triton_repo/{p.relative_to(repo / 'triton_repo')}" for p in (repo / "triton_repo").rglob("*.py")
    }
    assert want - names == set()


def test_no_host_path_secret_or_latest_anywhere(written: Path, tiny_spec_file: Path, tiny_checkpoint: Path) -> None:
    host = {
        str(Path.home()),
        str(tiny_spec_file.parent),
        str(tiny_checkpoint),
        str(written),
        os.environ["TOOLCHAIN_CACHE"],
        str(Path(__file__).resolve().parents[2]),  # this checkout
        "/tmp/",
    }
    checked = 0
    for f in written.rglob("*"):
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        checked += 1
        assert SECRET not in text, f
        assert not re.search(r":latest\b", text), f
        if "image/src/" in str(f):  # the toolchain source itself is copied verbatim
            continue
        for h in host:
            assert h not in text, f"{f} contains host path {h}"
    assert checked > 20


def test_engine_and_tokenizer_paths_point_into_the_image(written: Path) -> None:
    cfg = (written / "image/model_repository/tensorrt_llm/config.pbtxt").read_text()
    key = json.loads((written / "deploy.json").read_text())["engine_key"]
    assert f'"/engines/{key}"' in cfg
    for model in ("preprocessing", "postprocessing"):
        # the tokenizer travels inside the model repository, named relative to each model's directory
        assert '"../preprocessing/tokenizer"' in (written / f"image/model_repository/{model}/config.pbtxt").read_text()
    assert (written / "image/model_repository/preprocessing/tokenizer/tokenizer_config.json").is_file()


def test_dockerfile_from_the_spec_container_and_respects_the_image(written: Path, tiny_spec_file: Path) -> None:
    text = (written / "image/Dockerfile").read_text()
    (from_line,) = [ln for ln in text.splitlines() if ln.startswith("FROM ")]
    assert from_line == f"FROM {load_spec(tiny_spec_file).target.container}"
    assert "pip list --format=freeze > /opt/toolchain/image-constraints.txt" in text
    assert "-c /opt/toolchain/image-constraints.txt" in text
    assert 'm.version("tensorrt_llm")' in text and f'"{load_spec(tiny_spec_file).target.trtllm_version}"' in text
    assert "${" not in text
    assert "kubectl" not in text  # only a multi-node group's leader needs it


def test_kustomization_renders_and_validates(
    written: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    resources = render_kustomization(written / "k8s")
    assert [r["kind"] for r in resources] == [
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "ScaledObject",
        "NetworkPolicy",
        "PrometheusRule",  # the alerts and recording rules (tests/deploy/test_observability.py)
        "ConfigMap",  # the Grafana dashboard
    ]
    for r in resources:
        assert r["metadata"]["namespace"] == "llm"
        validate_manifest(r)
    dep = resources[0]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    image = yaml.safe_load((written / "k8s/kustomization.yaml").read_text())["images"][0]
    assert c["image"] == f"{image['name']}:{image['newTag']}"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["ENGINE_KEY"] == json.loads((written / "deploy.json").read_text())["engine_key"]
    assert env["TOOLCHAIN_REGISTRY"] == "s3://engines/prod"


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ("nvcr.io/nvidia/tritonserver:latest", "not pinned"),
        ("nvcr.io/nvidia/tritonserver", "not pinned"),
        ("Not An Image", "not an image reference"),
    ],
)
def test_unpinned_base_images_are_refused(tiny_spec_file: Path, tmp_path: Path, container: str, message: str) -> None:
    d = yaml.safe_load(tiny_spec_file.read_text())
    d["target"]["container"] = container
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(d))
    with pytest.raises(DeployError, match=message):
        deploy_cell(load_spec(spec), cell_id=None, out=tmp_path / "o", options=DeployOptions(registry="s3://b/p"))
    assert not (tmp_path / "o").exists()


def test_a_host_path_registry_needs_a_volume(tiny_spec_file: Path, tmp_path: Path) -> None:
    spec = load_spec(tiny_spec_file)
    with pytest.raises(DeployError, match="a pod cannot reach"):
        deploy_cell(spec, cell_id=None, out=tmp_path / "o", options=DeployOptions(registry=str(tmp_path / "reg")))
    res = deploy_cell(
        spec,
        cell_id=None,
        out=tmp_path / "o",
        options=DeployOptions(registry=str(tmp_path / "reg"), registry_pvc="engine-registry"),
    )
    dep = yaml.safe_load((res.out / "k8s/deployment.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    assert {"name": "registry", "persistentVolumeClaim": {"claimName": "engine-registry", "readOnly": True}} in pod[
        "volumes"
    ]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["TOOLCHAIN_REGISTRY"] == "/registry"


def test_no_tokenizer_names_the_deploy_option(cli: Cli, tmp_path: Path) -> None:
    # the engine path: its preprocessing/postprocessing models need the tokenizer (trtllm-serve brings its own)
    engine = tmp_path / "engine.yaml"
    engine.write_text(
        Path("engine_specs/llama-3.1-8b-fp8.yaml").read_text().replace("runtime: pytorch", "runtime: tensorrt")
    )
    r = cli(
        "deploy",
        engine,
        "--cell",
        "h100-sxm-b64-s4096-i2048-tp1",
        "--registry",
        "s3://b/p",
        "--out",
        tmp_path / "o",
    )
    assert r.exit_code == 2 and "pass --tokenizer DIR" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_cli(cli: Cli, tiny_spec_file: Path, tmp_path: Path) -> None:
    r = cli("deploy", "engine_specs/llama-3.3-70b-fp8-h100.yaml", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    # the autoscaler's bounds are the plan's own fleet: its silicon estimate where AIConfigurator is installed,
    # else its floor (issue 46: 24 GPUs planned, 2..3 TP2 replicas deployed)
    p = cli("plan", "engine_specs/llama-3.3-70b-fp8-h100.yaml", "--json")
    assert p.exit_code == 0, p.output
    (planned,) = json.loads(p.stdout)["cells"]
    fleet = planned["fleet_estimate"] or planned["fleet"]
    assert data["sizing"]["gpus_per_replica"] == 2
    assert data["sizing"]["max_replicas"] * 2 == fleet["total_gpus"]
    r = cli("deploy", tiny_spec_file, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "Error: --registry is required" in r.stderr
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "o", "--frontend", "grpc")
    assert r.exit_code == 2 and "'grpc' is not one of" in r.stderr
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "o", "--image", "me/llm:latest")
    assert r.exit_code == 2 and "--image 'me/llm:latest' is not pinned" in r.stderr
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "o" / "k8s" / "deployment.yaml") in r.stdout
    assert "names no registry host" in r.stderr  # the default image name would go to Docker Hub
    image = "registry.example.com/llm/tiny:1"
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "p", "--image", image)
    assert r.exit_code == 0 and "registry host" not in r.stderr and f"docker push {image}" in r.stderr
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "not empty" in r.stderr


def test_pytorch_runtime_is_served_by_trtllm_serve(
    tiny_spec_file: Path, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    d = yaml.safe_load(tiny_spec_file.read_text())
    d["runtime"] = "pytorch"  # the LLM API runtime needs TensorRT-LLM >= 1.2 and a container that has it
    d["target"].update(trtllm_version="1.2.1", container="nvcr.io/nvidia/tensorrt-llm/release:1.2.1")
    spec = tmp_path / "pt.yaml"
    spec.write_text(yaml.safe_dump(d))
    res = deploy_cell(
        load_spec(spec), cell_id=None, out=tmp_path / "o", engine="c" * 64, options=DeployOptions(registry="s3://b/p")
    )
    assert not (res.out / "image/model_repository").exists()
    assert "COPY model_repository" not in (res.out / "image/Dockerfile").read_text()
    resources = render_kustomization(res.out / "k8s")
    assert [r["kind"] for r in resources] == ["Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"]
    for r in resources:
        validate_manifest(r)
    dep = resources[0]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health" and c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert [p["name"] for p in c["ports"]] == ["http"]
    assert dep["spec"]["replicas"] == res.sizing.max_replicas  # nothing to autoscale on: the planner's max
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["TOOLCHAIN_FRONTEND"] == "trtllm-serve"
    with pytest.raises(DeployError, match="not served by frontend openai"):
        deploy_cell(
            load_spec(spec),
            cell_id=None,
            out=tmp_path / "o2",
            engine="c" * 64,
            options=DeployOptions(registry="s3://b/p", frontend="openai"),
        )
