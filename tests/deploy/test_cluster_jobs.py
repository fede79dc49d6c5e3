"""`toolchain matrix --format kubernetes|argo` and `toolchain job`: the build farm on Kubernetes.

The manifests are checked by the validators a cluster would apply: kubernetes-validate (strict) for the Jobs
and ConfigMaps, the Argo Workflow CRD schema recorded from upstream, checkov for pod security. The Jobs'
container command is then run here, for each index, with ``JOB_COMPLETION_INDEX`` set as Kubernetes sets it
and the ConfigMap's data as the kubelet mounts it (one file per key).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS
from tests.deploy.conftest import SHIPPED
from tests.registry.conftest import oci_env, oci_server, oci_url  # noqa: F401  (the OCI registry fixtures)

FAKES = REPO / "tests" / "fakes"
IMAGE = "registry.example.com/toolchain-build:1.1.0"


def _write(cli: Any, specs: list[Path], out: Path, *extra: object, fmt: str = "kubernetes") -> Any:
    r = cli("matrix", *specs, "--format", fmt, "--out", out, "--image", IMAGE, *extra)
    assert r.exit_code == 0, r.output
    return r


def _docs(out: Path) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(out)): yaml.safe_load(p.read_text()) for p in sorted(out.rglob("*.yaml"))}


def _mount(configmap: dict[str, Any], where: Path) -> Path:
    """The ConfigMap as the kubelet mounts it: one file per key."""
    where.mkdir(parents=True, exist_ok=True)
    for k, v in configmap["data"].items():
        (where / k).write_text(v)
    return where


@pytest.mark.slow
def test_jobs_for_the_shipped_specs_are_valid_and_map_every_index_to_one_cell(
    cli: Any, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    out = tmp_path / "jobs"
    _write(
        cli, SHIPPED, out, "--offline", "--registry", "s3://engines/prod", "--registry-secret", "engine-registry",
        "--queue", "gpu-builds",
    )  # fmt: skip
    docs = _docs(out)
    assert docs, "nothing written"
    cells_seen: list[str] = []
    m = json.loads(cli("matrix", *SHIPPED, "--offline").stdout)
    gpu_of = {b["id"]: b["gpu"] for b in m["build"]}
    from toolchain.hardware.catalog import lookup_gpu

    for rel, obj in docs.items():
        validate_manifest(obj)
        if obj["kind"] != "Job":
            continue
        d = rel.rsplit("/", 1)[0]
        cm = docs[f"{d}/cells.yaml"]
        kind = "build" if rel.endswith("build-job.yaml") else "quantize"
        entries = json.loads(cm["data"][f"{kind}.json"])
        s = obj["spec"]
        pod = s["template"]["spec"]
        (c,) = pod["containers"]
        assert s["completionMode"] == "Indexed" and s["completions"] == len(entries)
        assert pod["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
        assert f"{kind}.json" in " ".join(c["command"]) and c["command"][3:5] == ["job", kind]
        for e in entries:  # the spec each index names travels in the ConfigMap, and fits its pod's GPUs
            assert e["spec"] in cm["data"]
            assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == e["gpus"]
        if kind == "build":  # every cell of a Job on its GPU's nodes (GPU Feature Discovery's product label)
            for e in entries:
                assert pod["nodeSelector"] == {"nvidia.com/gpu.product": lookup_gpu(gpu_of[e["id"]]).gfd_product}
        assert pod["restartPolicy"] == "Never" and s["backoffLimitPerIndex"] >= 1
        rules = s["podFailurePolicy"]["rules"]
        assert {
            "action": "FailIndex",
            "onExitCodes": {"containerName": "job", "operator": "In", "values": [2, 3, 4]},
        } in rules
        assert any(r["action"] == "Ignore" and r["onPodConditions"][0]["type"] == "DisruptionTarget" for r in rules)
        assert s["activeDeadlineSeconds"] > 0 and s["ttlSecondsAfterFinished"] > 0
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-builds"
        assert c["envFrom"] == [{"secretRef": {"name": "engine-registry", "optional": False}}]
        assert pod["securityContext"]["runAsNonRoot"] and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        if kind == "build":
            cells_seen += [e["id"] for e in entries]
    assert sorted(cells_seen) == sorted(b["id"] for b in m["build"])  # every cell exactly once


def test_argo_workflow_validates_against_the_recorded_crd_schema(
    cli: Any, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    out = tmp_path / "argo"
    _write(cli, SHIPPED, out, "--offline", "--registry", "s3://engines/prod", fmt="argo")
    docs = _docs(out)
    wf = docs.pop("workflow.yaml")
    for cm in docs.values():
        validate_manifest(cm)
    validate_manifest(wf)
    assert wf["apiVersion"] == "argoproj.io/v1alpha1" and wf["kind"] == "Workflow"
    dag = {t["name"]: t for t in wf["spec"]["templates"][0]["dag"]["tasks"]}
    builds = [t for t in dag.values() if t["name"].startswith("b-")]
    quantizes = {t["name"] for t in dag.values() if t["name"].startswith("q-")}
    assert len(builds) == len(json.loads(cli("matrix", *SHIPPED, "--offline").stdout)["build"])
    for b in builds:  # a build of quantized weights depends on its quantize group's task, which exists
        assert set(b.get("dependencies", [])) <= quantizes
    assert quantizes and any(b.get("dependencies") for b in builds)
    assert any(not b.get("dependencies") for b in builds)  # bf16 cells (the multi-LoRA spec) quantize nothing
    assert set(dag["tag-set"]["dependencies"]) == {b["name"] for b in builds}
    by_name = {t["name"]: t for t in wf["spec"]["templates"]}
    for t in builds:  # the task's index is its entry in the build index file of its template's ConfigMap
        tmpl = by_name[t["template"]]
        assert "--index" in tmpl["container"]["command"]


@pytest.mark.slow
def test_checkov_passes_the_jobs(cli: Any, tmp_path: Path) -> None:
    from tests.validators import ALWAYS_SKIPPED, checkov

    out = tmp_path / "jobs"
    _write(cli, SHIPPED, out, "--offline", "--registry", "s3://engines/prod", "--namespace", "builds")
    # the image is named by tag (CKV_K8S_43 is conditional on that); the rest must pass
    # CKV2_K8S_6 asks for a NetworkPolicy per pod: a build pod needs egress to the registry and the Hub, so the
    # Jobs bring none and the namespace's own policy applies (docs/cluster-builds.md)
    skipped = set(ALWAYS_SKIPPED) | {"CKV_K8S_43", "CKV2_K8S_6"}
    failed = {f["check_id"] for f in checkov(out, ("kubernetes",))} - skipped
    assert failed == set(), failed


@pytest.mark.parametrize(
    ("node_map", "message"),
    [
        (
            {"H100-SXM": {"nodeSelector": {"pool": "h100"}, "gpus": 1}},
            "needs 2 GPUs (TP 2 x PP 1); a H100-SXM node has 1",
        ),
        ({"A10G": {"nodeSelector": {"pool": "a10g"}}}, "no node pool for GPU H100-SXM in the --node-map"),
        ({"H100-SXM": {"gpus": 8}}, "H100-SXM has no nodeSelector"),
    ],
)
def test_bad_node_pools_are_one_line_errors(cli: Any, tmp_path: Path, node_map: dict[str, Any], message: str) -> None:
    nm = tmp_path / "nodes.yaml"
    nm.write_text(yaml.safe_dump(node_map))
    spec = SPECS / "llama-3.3-70b-fp8-h100.yaml"
    assert spec.is_file()
    r = cli("matrix", spec, "--format", "kubernetes", "--out", tmp_path / "j", "--image", IMAGE, "--offline",
            "--registry", "s3://e/p", "--node-map", nm)  # fmt: skip
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output and r.output.startswith("Error: ")
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize("args", [("--registry", "s3://e/p"), ("--image", IMAGE)])
def test_missing_image_or_registry_is_refused(cli: Any, tmp_path: Path, args: tuple[str, ...]) -> None:
    r = cli("matrix", SPECS / "tiny.yaml", "--format", "kubernetes", "--out", tmp_path / "j", "--offline", *args)
    assert r.exit_code == 2 and r.output.startswith("Error: --"), r.output


@pytest.fixture
def image_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build image, simulated: TensorRT-LLM 1.1.0's packages and the stand-in trtllm-build."""
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "py"))
    monkeypatch.setenv("TRTLLM_ROOT", str(FAKES / "trtllm_root"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "oci"])
def test_each_index_does_exactly_its_cell_and_a_second_run_skips_it(
    backend: str,
    request: pytest.FixtureRequest,
    cli: Any,
    tiny_spec_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    image_env: None,
) -> None:
    registry = str(tmp_path / "registry") if backend == "local" else request.getfixturevalue("oci_url")
    out = tmp_path / "jobs"
    _write(cli, [tiny_spec_file], out, "--registry", registry)
    (where,) = {p.parent for p in out.rglob("cells.yaml")}
    cells = _mount(yaml.safe_load((where / "cells.yaml").read_text()), tmp_path / "mnt")
    (bentry,) = json.loads((cells / "build.json").read_text())
    (qentry,) = json.loads((cells / "quantize.json").read_text())

    def job(kind: str, index: str, *extra: str) -> Any:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", index)
        return cli("job", kind, "--cells", cells / f"{kind}.json", "--registry", registry, "--json", *extra)

    # the build pod started first waits for its checkpoint, bounded, and says so
    r = job("build", "0", "--wait-quantized", "0")
    assert r.exit_code == 1 and "is not in" in json.loads(r.stdout)["error"], r.output
    r = job("quantize", "0", "--device", "cpu")
    assert r.exit_code == 0, r.output
    q = json.loads(r.stdout)
    assert q["status"] == "quantized" and q["quantized_key"] == qentry["quantized_key"]
    assert json.loads(job("quantize", "0", "--device", "cpu").stdout)["status"] == "cached"

    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "other-pod"))  # a new pod: nothing local, only the registry
    r = job("build", "0", "--wait-quantized", "5")
    assert r.exit_code == 0, r.output
    b = json.loads(r.stdout)
    assert (b["status"], b["engine_key"], b["cell"]) == ("built", bentry["engine_key"], bentry["cell"])
    assert json.loads(job("build", "0").stdout)["status"] == "cached"

    for bad in ("1", "-1"):
        r = job("build", bad)
        assert r.exit_code == 2 and "is not in" in json.loads(r.stdout)["error"], r.output
    monkeypatch.delenv("JOB_COMPLETION_INDEX")
    r = cli("job", "build", "--cells", cells / "build.json", "--registry", registry)
    assert r.exit_code == 2 and "JOB_COMPLETION_INDEX is not set" in r.output

    # --check: from the registry alone, the cell is built; a re-applied matrix has nothing left to write
    r = cli("matrix", tiny_spec_file, "--format", "kubernetes", "--check", "--registry", registry, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)["report"]
    assert (rep["built"], rep["missing"], rep["quantize_pending"]) == (1, 0, [])
    again = tmp_path / "again"
    _write(cli, [tiny_spec_file], again, "--registry", registry)
    assert not again.exists() or not list(again.rglob("*.yaml"))

    r = cli("job", "tag", "--cells", cells / "build.json", "--tag", "rel1", "--registry", registry, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tags"] == {f"rel1-{bentry['id']}": bentry["engine_key"]}
