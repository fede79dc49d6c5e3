"""What `toolchain deploy` writes, checked by the tools a cluster admin and a CI reviewer run: checkov
(kubernetes + dockerfile frameworks, one run over every manifest set and Dockerfile), hadolint on each Dockerfile,
`sh -n` and shellcheck on the image's shell files (tests/validators.py; CHECKOV_SKIPS names every check left
out, with its reason). The offline Kubernetes schemas are checked in test_manifests.py / test_output.py."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import SPECS as SHIPPED_DIR
from tests.deploy.conftest import SHIPPED, render_kustomization
from tests.helpers import deploy_target
from tests.validators import ALWAYS_SKIPPED, CHECKOV_SKIPS, CHECKOV_SKIPS_WHEN, checkov, hadolint, shell
from toolchain.deploy import DeployOptions
from toolchain.deploy.context import ENTRYPOINT, KUBESSH, dockerfile, pinned_image
from toolchain.deploy.manifests import SERVER_UID, Target, manifests
from toolchain.deploy.sizing import size_cell
from toolchain.pipeline.fleet import deploy_cell
from toolchain.planning.plan import plan_cell
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand
from toolchain.specs.models import EngineSpec

pytestmark = [pytest.mark.slow, pytest.mark.validator]

DIGEST = "sha256:" + "ab" * 32
DGD_SPEC = SHIPPED_DIR / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"


def _engine_70b() -> EngineSpec:
    """The 70B TP2 spec on the engine path (its Triton ranks span nodes; trtllm-serve runs on one node)."""
    spec = load_spec(SHIPPED[1])
    d = spec.model_dump(mode="json") | {"runtime": "tensorrt"}
    d["serving"]["cuda_graphs"] = {"enabled": True}  # the backend captures as batches occur: no padding, no sizes
    return EngineSpec.model_validate(d).with_base_dir(spec.base_dir)


CELLS = [c for spec in SHIPPED for c in expand(load_spec(spec))]
# the conditional skips, by the marker in a manifest set's directory or file name
WHEN_MARK = {
    "image by tag": "-tag",
    "no --namespace": "-nons",
    "group leader pod": "leader",
    "group worker pod": "worker",
    "dynamo component pod": "dgd-component",
}


def _target(*, image: str, namespace: str | None) -> Target:
    return dataclasses.replace(deploy_target(), image=image, namespace=namespace)


def _sized(cell: Cell, **kw: Any) -> Any:
    return size_cell(cell, plan_cell(cell, arch_for_spec(cell.spec, allow_network=False)), **kw)


def _write_set(d: Path, res: dict[str, dict[str, Any]], namespace: str) -> None:
    """A manifest set as kubectl would apply it (the kustomization's namespace on every object); a
    LeaderWorkerSet's pod templates also as Pods, the kinds checkov knows."""
    d.mkdir(parents=True)
    for name, obj in res.items():
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        (d / name).write_text(yaml.safe_dump(obj, sort_keys=False))
        if obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            for role, key in (("leader", "leaderTemplate"), ("worker", "workerTemplate")):
                meta = {"name": f"app-{role}", "namespace": namespace, "labels": group[key]["metadata"]["labels"]}
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": group[key]["spec"]}
                (d / f"lws-{role}-pod.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))


@pytest.fixture(scope="module")
def written(tiny_spec_file: Path, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`toolchain deploy` of the tiny spec by digest in a namespace and by tag with no namespace, and of the 70B
    spec across nodes."""
    root = tmp_path_factory.mktemp("written")
    out = {}
    for name, opts in {
        "digest": DeployOptions(
            registry="s3://engines/prod",
            registry_secret="engine-registry",
            namespace="llm",
            image=f"registry.example.com/llm/tiny@{DIGEST}",
        ),
        "tag-nons": DeployOptions(registry="s3://engines/prod", image="registry.example.com/llm/tiny:v1"),
    }.items():
        res = deploy_cell(load_spec(tiny_spec_file), cell_id=None, out=root / name, options=opts)
        out[name] = res.out
    # the 70B TP2 spec across two one-GPU nodes: a LeaderWorkerSet, RBAC and kubectl in the image
    lws = DeployOptions(
        registry="s3://engines/prod", namespace="llm", image=f"registry.example.com/llm/70b@{DIGEST}", gpus_per_node=1
    )
    res = deploy_cell(
        _engine_70b(), cell_id=None, out=root / "lws", options=lws, engine="a" * 64, tokenizer=tiny_checkpoint
    )
    assert res.sizing.multi_node
    out["lws"] = res.out
    return out


@pytest.fixture(scope="module")
def scanned(written: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Every manifest set and Dockerfile under one tree, and checkov's failed checks over it (one run)."""
    tree = tmp_path_factory.mktemp("checkov")
    for cell in CELLS:  # every shipped cell, by digest in a namespace
        _write_set(
            tree / f"{cell.spec.name}-{cell.id}",
            manifests(_target(image=f"r.example.com/llm@{DIGEST}", namespace="llm"), cell, _sized(cell)),
            "llm",
        )
    lws_cell = expand(_engine_70b())[0]  # the 70B TP2 cell across two nodes: a LeaderWorkerSet
    multi = _sized(lws_cell, gpus_per_node=1)
    assert multi.multi_node
    _write_set(
        tree / "lws", manifests(_target(image=f"r.example.com/llm@{DIGEST}", namespace="llm"), lws_cell, multi), "llm"
    )
    for name, out in written.items():
        d = tree / f"deploy-{name}"
        rendered = render_kustomization(out / "k8s")
        ns = rendered[0]["metadata"]["namespace"]
        _write_set(d, {f"{r['kind'].lower()}.yaml": r for r in rendered}, ns)
        (d / "Dockerfile").write_text((out / "image" / "Dockerfile").read_text())
    (tree / "dgd").mkdir()  # the DGD's components as Pods (checkov skips a CRD), beside what is written with it
    dgd_out = tmp_path_factory.mktemp("dgd")
    for i, pod in enumerate(_dgd_pods(dgd_out).values()):
        (tree / "dgd" / f"dgd-component{i}-pod.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))
    for res in render_kustomization(dgd_out / "out"):
        if res["kind"] == "NetworkPolicy":
            (tree / "dgd" / "networkpolicy.yaml").write_text(yaml.safe_dump(res, sort_keys=False))
    for name, df in _dockerfiles().items():
        (tree / f"docker-{name}").mkdir()
        (tree / f"docker-{name}" / "Dockerfile").write_text(df)
    return tree, checkov(tree)


# What the Dynamo operator adds to the labels of every pod it makes from a DynamoGraphDeployment's component
# (docs/dynamo.md, "NetworkPolicy": ai-dynamo/dynamo deploy/operator consts.go and graph.go; the dynamo namespace is
# "<namespace>-<name>", ComputeDynamoNamespace)
def _operator_labels(dgd: dict[str, Any], comp: dict[str, Any]) -> dict[str, str]:
    name, ns = dgd["metadata"]["name"], dgd["metadata"]["namespace"]
    return {
        "nvidia.com/dynamo-graph-deployment-name": name,
        "nvidia.com/dynamo-component": comp["name"],
        "nvidia.com/dynamo-component-type": comp["type"],
        "nvidia.com/dynamo-namespace": f"{ns}-{name}",
    }


def _dgd_pods(tmp: Path) -> dict[str, dict[str, Any]]:
    """`dynamo deploy` of the disaggregated spec (its runtime image and the toolchain image by digest, pulling a
    registry artifact): each component's pod template as the Pod the operator makes of it, with the labels the
    operator adds."""
    from toolchain.cli.main import app

    d = yaml.safe_load(DGD_SPEC.read_text())
    d["target"]["container"] += f"@{DIGEST}"  # the release's image, pinned
    spec = tmp / "disagg.yaml"
    spec.write_text(yaml.safe_dump(d, sort_keys=False))
    args = ["dynamo", "deploy", str(spec), "--out", str(tmp / "out"), "--namespace", "llm", "--engine", "cd" * 32]
    args += ["--registry", "s3://engines/prod", "--toolchain-image", f"registry.example.com/toolchain@{DIGEST}"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    dgd = yaml.safe_load((tmp / "out" / "dynamographdeployment.yaml").read_text())
    pods = {}
    for comp in dgd["spec"]["components"]:
        tmpl = comp["podTemplate"]
        labels = {**tmpl["metadata"]["labels"], **_operator_labels(dgd, comp)}
        meta = {"name": f"dgd-{comp['name']}", "namespace": "llm", "labels": labels}
        pods[comp["name"]] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
    assert len(pods) >= 3 and all(p["spec"].get("initContainers") for n, p in pods.items() if n != "frontend")
    return pods


def test_dgd_pods_validate_as_pods(tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None]) -> None:
    """Each component's pod, as the Pod the operator makes of it, passes the Kubernetes schema (strict)."""
    for pod in _dgd_pods(tmp_path).values():
        validate_manifest(pod)


def _dockerfiles() -> dict[str, str]:
    base = pinned_image("nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3", "t")
    img, eng = "/opt/toolchain", "/engines"
    return {
        "single-node": dockerfile(base, trtllm_version="1.1.0", image_root=img, engines_root=eng),
        "multi-node": dockerfile(base, trtllm_version="1.1.0", image_root=img, engines_root=eng, kubectl_minor="1.34"),
        "llmapi": dockerfile(
            pinned_image("nvcr.io/nvidia/tensorrt-llm/release:1.2.1", "t"),
            trtllm_version="1.2.1",
            image_root=img,
            engines_root=eng,
            repository=False,
        ),
    }


def _allowed(path: str) -> set[str]:
    allowed = set(ALWAYS_SKIPPED)
    for check, conditions in CHECKOV_SKIPS_WHEN.items():
        if any(WHEN_MARK[when] in path for when in conditions):
            allowed.add(check)
    return allowed


def test_every_skip_has_a_reason_and_a_scope() -> None:
    assert set(CHECKOV_SKIPS_WHEN) <= set(CHECKOV_SKIPS) and {w for c in CHECKOV_SKIPS_WHEN.values() for w in c} == set(
        WHEN_MARK
    )
    assert all(len(reason) > 40 for reason in CHECKOV_SKIPS.values())


def test_checkov_passes_every_manifest_set_and_dockerfile(scanned: tuple[Path, list[dict[str, Any]]]) -> None:
    tree, failed = scanned
    files = [p for p in tree.rglob("*") if p.is_file()]
    assert len(files) > 60
    unexpected = [f for f in failed if f["check_id"] not in _allowed(f["file"])]
    assert not unexpected, "\n".join(f"{f['file']}: {f['check_id']} {f['name']}" for f in unexpected)
    # the checks that matter were run, and the conditional skips are needed exactly where they are scoped
    seen = {f["check_id"] for f in failed}
    assert {"CKV_K8S_43", "CKV_K8S_21"} <= seen  # the by-tag, no-namespace deployment
    assert any(f["check_id"] == "CKV_K8S_38" and "leader" in f["file"] for f in failed)
    assert len(list((tree / "dgd").glob("*-pod.yaml"))) >= 3  # the Dynamo components were scanned too
    # the checks that failed before on every Dynamo component (issue Trust II): resources, token, digest; and
    # the NetworkPolicy written beside the DynamoGraphDeployment selects every component's pod
    dgd = [f for f in failed if "dgd-component" in f["file"]]
    assert not {"CKV_K8S_10", "CKV_K8S_12", "CKV_K8S_13", "CKV_K8S_38", "CKV_K8S_43", "CKV2_K8S_6"} & {
        f["check_id"] for f in dgd
    }
    assert (tree / "dgd" / "networkpolicy.yaml").is_file()


def test_checkov_sees_what_the_old_manifests_got_wrong(tmp_path: Path) -> None:
    """The checks fail on a pod without the security context, memory limit and token setting (so the scan
    above can fail): checkov run on a stripped copy of a generated Deployment."""
    res = manifests(_target(image=f"r.example.com/llm@{DIGEST}", namespace="llm"), CELLS[0], _sized(CELLS[0]))
    dep = res["deployment.yaml"]
    pod = dep["spec"]["template"]["spec"]
    del pod["securityContext"], pod["automountServiceAccountToken"]
    del pod["containers"][0]["securityContext"], pod["containers"][0]["resources"]["limits"]["memory"]
    dep["metadata"]["namespace"] = "llm"
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(dep))
    seen = {f["check_id"] for f in checkov(tmp_path, ("kubernetes",))}
    assert {"CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_38", "CKV_K8S_13"} <= seen


@pytest.mark.parametrize("name", ["single-node", "multi-node", "llmapi"])
def test_hadolint_passes_every_dockerfile(name: str, tmp_path: Path) -> None:
    f = tmp_path / "Dockerfile"
    f.write_text(_dockerfiles()[name])
    r = hadolint(f)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_passes_the_written_dockerfiles(written: dict[str, Path]) -> None:
    assert "apt-get install" in (written["lws"] / "image" / "Dockerfile").read_text()  # kubectl for the leader
    for out in written.values():
        r = hadolint(out / "image" / "Dockerfile")
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("script", [ENTRYPOINT, KUBESSH], ids=lambda p: p.name)
def test_image_shell_files_pass_sh_and_shellcheck(script: Path, tmp_path: Path) -> None:
    shell(script.read_text(), tmp_path, script.name)


# --- the listed defects, one by one ---------------------------------------------------------------------


def _pods(res: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in res.values():
        if obj["kind"] == "Deployment":
            out.append(("server", obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "LeaderWorkerSet":
            g = obj["spec"]["leaderWorkerTemplate"]
            out += [("leader", g["leaderTemplate"]["spec"]), ("worker", g["workerTemplate"]["spec"])]
    return out


def test_pods_run_restricted_as_the_images_user_with_memory_limits() -> None:
    cell = expand(_engine_70b())[0]
    for s in (_sized(cell), _sized(cell, gpus_per_node=1)):
        res = manifests(_target(image="r.example.com/llm:v1", namespace=None), cell, s)
        for role, pod in _pods(res):
            sc = pod["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == sc["runAsGroup"] == SERVER_UID
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            (c,) = pod["containers"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert pod["automountServiceAccountToken"] is (role == "leader")
            mem = c["resources"]
            assert mem["limits"]["memory"] == f"{s.memory_limit_bytes // 2**30}Gi"
            assert s.memory_limit_bytes >= s.memory_request_bytes + s.shm_bytes // 2


def test_the_image_context_is_readable_by_the_non_root_user(written: dict[str, Path]) -> None:
    ctx = written["digest"] / "image"
    for p in [ctx, *ctx.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        if p.is_dir():
            assert mode == 0o755, f"{p.relative_to(ctx)} is {oct(mode)}"
        else:
            assert mode & 0o004, f"{p.relative_to(ctx)} is {oct(mode)}"
    text = (ctx / "Dockerfile").read_text()
    assert f"USER {SERVER_UID}:{SERVER_UID}" in text and "TOOLCHAIN_TOKENIZER" not in text
    assert os.access(ctx / "entrypoint.sh", os.X_OK)


def test_an_image_by_digest_works_and_a_tag_is_flagged(
    written: dict[str, Path], cli: Any, tiny_spec_file: Path, tmp_path: Path
) -> None:
    by_digest = render_kustomization(written["digest"] / "k8s")
    (c,) = by_digest[0]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"registry.example.com/llm/tiny@{DIGEST}" and c["imagePullPolicy"] == "IfNotPresent"
    k = yaml.safe_load((written["digest"] / "k8s" / "kustomization.yaml").read_text())
    assert k["images"] == [{"name": "registry.example.com/llm/tiny", "digest": DIGEST}]
    assert json.loads((written["digest"] / "deploy.json").read_text())["next"] == ["kubectl apply -k k8s"]
    by_tag = render_kustomization(written["tag-nons"] / "k8s")
    assert by_tag[0]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    r = cli(
        "deploy",
        tiny_spec_file,
        "--registry",
        "s3://b/p",
        "--out",
        tmp_path / "t",
        "--image",
        "registry.example.com/llm/tiny:v1",
    )
    assert r.exit_code == 0, r.output
    assert "named by tag" in r.stderr and "kustomize edit set image registry.example.com/llm/tiny@sha256:" in r.stderr
    r = cli(
        "deploy",
        tiny_spec_file,
        "--registry",
        "s3://b/p",
        "--out",
        tmp_path / "d",
        "--image",
        f"registry.example.com/llm/tiny:v1@{DIGEST}",
    )
    assert r.exit_code == 0, r.output
    assert "named by digest" in r.stderr and "docker build" not in r.stderr
    k = yaml.safe_load((tmp_path / "d" / "k8s" / "kustomization.yaml").read_text())
    assert k["images"] == [{"name": "registry.example.com/llm/tiny", "digest": DIGEST}]


def test_the_autoscaler_query_is_scoped_to_the_namespace_applied_to(
    written: dict[str, Path], validate_manifest: Callable[[dict[str, Any]], None]
) -> None:
    for name, ns in (("digest", "llm"), ("tag-nons", "default")):
        resources = render_kustomization(written[name] / "k8s")
        so = next(r for r in resources if r["kind"] == "ScaledObject")
        assert so["metadata"]["namespace"] == ns
        query = so["spec"]["triggers"][0]["metadata"]["query"]
        assert query.count(f'namespace="{ns}"') == 2, query  # numerator and denominator
        for r in resources:
            validate_manifest(r)
