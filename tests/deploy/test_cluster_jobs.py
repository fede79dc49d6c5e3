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
    # the checkpoint is on the volume the pods mount at the same path (here: the directory that holds it)
    volume = ("--model-volume", f"models:{tiny_spec_file_source(tiny_spec_file).parent}")
    _write(cli, [tiny_spec_file], out, "--registry", registry, *volume)
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
    _write(cli, [tiny_spec_file], again, "--registry", registry, *volume)
    assert not again.exists() or not list(again.rglob("*.yaml"))

    r = cli("job", "tag", "--cells", cells / "build.json", "--tag", "rel1", "--registry", registry, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tags"] == {f"rel1-{bentry['id']}": bentry["engine_key"]}


def tiny_spec_file_source(spec: Path) -> Path:
    return Path(yaml.safe_load(spec.read_text())["model"]["source"])


def _local(tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A shipped spec, copied into ``tmp_path/specs`` and edited to name a local directory."""
    d = yaml.safe_load((SPECS / name).read_text())
    edit(d)
    (tmp_path / "specs").mkdir(exist_ok=True)
    dest = tmp_path / "specs" / name
    dest.write_text(yaml.safe_dump(d))
    return dest


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        d[last] = value

    return edit


@pytest.mark.parametrize("fmt", ["kubernetes", "argo"])
def test_the_shipped_specs_with_a_local_model_are_refused_naming_the_spec_and_the_fix(
    cli: Any, tmp_path: Path, fmt: str
) -> None:
    """Measured before: the tiny specs (model.source ../.work/tiny-llama) went into the Jobs, and their build
    index exited 2 in the pod on a key mismatch, naming another TensorRT-LLM or a changed spec as the cause."""
    out = tmp_path / "j"
    args = ("matrix", *sorted(SPECS.glob("*.yaml")), "--format", fmt, "--out", out, "--image", IMAGE, "--offline")
    r = cli(*args, "--registry", "s3://e/p")
    assert r.exit_code == 2, r.output
    (line,) = r.output.splitlines()
    assert line.startswith("Error: engine_specs/tiny") or "/engine_specs/tiny" in line, line
    assert "model.source '../.work/tiny-llama'" in line and "--model-volume CLAIM:MOUNTPATH" in line
    assert not out.exists()
    r = cli(*args, "--registry", "s3://e/p", "--json")
    assert r.exit_code == 2 and "--model-volume" in json.loads(r.stdout)["hint"], r.output


@pytest.mark.parametrize(
    ("name", "edit", "field"),
    [
        ("speculative-draft-target-llama-3.1-8b.yaml", _set("speculative.draft.source", "draft"), "speculative.draft"),
        ("multi-lora-llama-3.1-8b.yaml", _set("lora.adapters", ["hf://o/a@v1", "adapters/sql"]), "lora.adapters[1]"),
    ],
)
def test_a_local_draft_model_or_adapter_is_refused_too(
    cli: Any, tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    spec = _local(tmp_path, name, edit)
    r = cli("matrix", spec, "--format", "kubernetes", "--out", tmp_path / "j", "--image", IMAGE, "--offline",
            "--registry", "s3://e/p")  # fmt: skip
    assert r.exit_code == 2 and field in r.output and "--model-volume" in r.output, r.output
    r = cli("matrix", spec, "--format", "kubernetes", "--out", tmp_path / "j", "--image", IMAGE, "--offline",
            "--registry", "s3://e/p", "--model-volume", f"models:{tmp_path / 'elsewhere'}")  # fmt: skip
    assert r.exit_code == 2 and f"{field}" in r.output and "is not under the --model-volume" in r.output, r.output


@pytest.mark.parametrize("fmt", ["kubernetes", "argo"])
def test_a_model_volume_mounts_the_claim_and_the_pods_get_the_sources_path(
    cli: Any, tmp_path: Path, fmt: str, validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    models = tmp_path / "models"
    spec = _local(tmp_path, "tiny.yaml", _set("model.source", "../models/tiny-llama"))  # relative to the spec
    out = tmp_path / "j"
    _write(cli, [spec], out, "--offline", "--registry", "s3://e/p", "--model-volume", f"ckpts:{models}", fmt=fmt)
    docs = _docs(out)
    for obj in docs.values():
        validate_manifest(obj)
    cms = [d for d in docs.values() if d["kind"] == "ConfigMap"]
    (text,) = [v for cm in cms for k, v in cm["data"].items() if k.endswith(".yaml")]
    assert yaml.safe_load(text)["model"]["source"] == str(models / "tiny-llama")  # not relative to the ConfigMap
    pods = [d["spec"]["template"]["spec"] for d in docs.values() if d["kind"] == "Job"]
    pods += [  # Argo: every quantize/build template (the tag-set step reads only the index files)
        {"containers": [t["container"]], "volumes": t["volumes"]}
        for d in docs.values()
        if d["kind"] == "Workflow"
        for t in d["spec"]["templates"]
        if "container" in t and t["name"] != "tag-set"
    ]
    assert pods
    for pod in pods:
        (c,) = pod["containers"]
        assert {"name": "models", "mountPath": str(models), "readOnly": True} in c["volumeMounts"]
        assert {"name": "models", "persistentVolumeClaim": {"claimName": "ckpts", "readOnly": True}} in pod["volumes"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("models", "does not start with a PersistentVolumeClaim name"),
        ("Models:/models", "does not start with a PersistentVolumeClaim name"),
        ("models:relative", "is not an absolute, normalized mount path"),
        ("models:/models/../x", "is not an absolute, normalized mount path"),
        ("models:/etc/toolchain", "overlaps the pods' own mount /etc/toolchain/cells"),
        ("models:/work", "overlaps the pods' own mount /work"),
    ],
)
def test_a_bad_model_volume_is_a_one_line_error(cli: Any, tmp_path: Path, value: str, message: str) -> None:
    r = cli("matrix", SPECS / "tiny.yaml", "--format", "kubernetes", "--out", tmp_path / "j", "--image", IMAGE,
            "--offline", "--registry", "s3://e/p", "--model-volume", value)  # fmt: skip
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and message in r.output, r.output


def test_ci_formats_run_in_the_checkout_and_take_no_model_volume(cli: Any) -> None:
    """GitHub and GitLab jobs run in the checkout, where a local source is (tiny-checkpoint writes it there)."""
    specs = sorted(SPECS.glob("*.yaml"))
    assert cli("matrix", *specs, "--format", "github", "--offline").exit_code == 0
    r = cli("matrix", *specs, "--format", "github", "--offline", "--model-volume", "m:/models")
    assert r.exit_code == 2 and "apply to --format kubernetes or argo" in r.output, r.output
