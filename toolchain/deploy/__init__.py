"""A self-contained deployment of one cell: container build context and Kubernetes manifests.

Output layout (``toolchain deploy SPEC --cell ID --out DIR``)::

    DIR/deploy.json               what was decided and why: cell, engine key, images, sizing, pinned versions
    DIR/image/                    docker build context (see toolchain.deploy.context)
    DIR/k8s/kustomization.yaml    `kubectl apply -k DIR/k8s`
    DIR/k8s/deployment.yaml       (leaderworkerset.yaml when one replica spans nodes)
    DIR/k8s/service.yaml  servicemonitor.yaml  pdb.yaml  scaledobject.yaml
    DIR/k8s/prometheusrule.yaml  dashboard.yaml   alerts and the Grafana dashboard (toolchain.deploy.observability)
    DIR/observability/rules.yaml  dashboard.json  the same as a plain rule file and dashboard JSON

This stage imports specs, hardware and the small shared modules only. The planner's result and the emitted
Triton repository are passed in (``toolchain.pipeline.fleet`` runs planning and emission, then this).
Nothing host-specific reaches the output: the written files are scanned for the host paths that went in
and for an image tagged ``latest`` before the directory is renamed into place.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain import yamlout
from toolchain.artifacts.plan import CellPlan
from toolchain.deploy.context import (
    ENTRYPOINT,
    KUBESSH,
    ImageRef,
    copy_source,
    dockerfile,
    pinned_image,
    readable_by_all,
)
from toolchain.deploy.manifests import DEFAULT_NAMESPACE, PINNED, Target, app_name, kustomization, manifests
from toolchain.deploy.observability import RuleTable, write_observability
from toolchain.deploy.sizing import Sizing, size_cell
from toolchain.digest import pinned_digest
from toolchain.errors import DeployError
from toolchain.outdir import owned_output
from toolchain.specs.matrix import Cell

__all__ = ["DeployOptions", "DeployResult", "RuleTable", "Sizing", "check_options", "size_cell", "write_deployment"]

LATEST = re.compile(r"[:@](latest)\b")  # an image tag named latest
FRONTENDS = ("openai", "kserve", "trtllm-serve")


@dataclass(frozen=True)
class DeployOptions:
    registry: str
    image: str | None = None  # the image to build; default <app>:<profile id prefix>
    registry_secret: str | None = None
    registry_pvc: str | None = None
    namespace: str | None = None
    frontend: str | None = None  # None: openai for runtime tensorrt, trtllm-serve for runtime pytorch
    engines_root: str = "/engines"
    image_root: str = "/opt/toolchain"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    queue_target_ms: float = 200.0
    gpus_per_node: int = 8
    min_replicas: int | None = None
    max_replicas: int | None = None
    force: bool = False
    public_key_pem: bytes | None = None  # the image requires engines signed by this key (docs/signing.md)
    # sha256:... of the engine's manifest the pods' pull must find (`cache pull --digest`); None: pull by key only
    engine_digest: str | None = None


@dataclass
class DeployResult:
    out: Path
    app: str
    image: str
    engine_key: str
    sizing: Sizing
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    engine_digest: str | None = None  # the manifest the pods' pull is pinned to
    warnings: list[str] = field(default_factory=list)  # written as asked, but weaker than it could be

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "app": self.app,
            "image": self.image,
            "engine_key": self.engine_key,
            "engine_digest": self.engine_digest,
            "sizing": self.sizing.to_json(),
            "files": self.files,
            "notes": self.notes,
            "warnings": self.warnings,
        }


def registry_host(image: str) -> str | None:
    """The registry host of an image reference (``nvcr.io``, ``localhost:5000``), None for a bare name that
    Docker resolves to Docker Hub (its first path part has no '.' or ':' and is not ``localhost``)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def _registry_in_pod(o: DeployOptions) -> str:
    from toolchain import redact

    if redact.has_credentials(o.registry):
        raise DeployError(
            f"registry {redact.url(o.registry)!r} carries credentials, which would be written into the manifests in "
            "plain text",
            "drop the 'user:password@' part and give them in a Secret: --registry-secret NAME",
        )
    if o.registry.startswith(("s3://", "hf://", "oci://")):
        if o.registry_pvc:
            raise DeployError("--registry-pvc is for a registry on a volume, not " + o.registry, "drop --registry-pvc")
        return o.registry
    if "://" in o.registry:
        raise DeployError(
            f"registry '{o.registry}' is not s3://, hf://, oci:// or a volume",
            "use s3://bucket/prefix, hf://org/repo or oci://host/repository",
        )
    if not o.registry_pvc:
        raise DeployError(
            f"registry '{o.registry}' is a path on this machine, which a pod cannot reach",
            "push the engine to s3://..., hf://... or oci://... (`toolchain cache push`), or pass --registry-pvc CLAIM "
            "for a volume that holds the registry",
        )
    return "/registry"


def check_options(o: DeployOptions) -> None:
    """Refuse options no deployment can be written with (before planning or emitting anything)."""
    if o.frontend is not None and o.frontend not in FRONTENDS:
        raise DeployError(
            f"frontend '{o.frontend}' is not one of {', '.join(FRONTENDS)}",
            "use openai or kserve (trtllm-serve: pytorch)",
        )
    _registry_in_pod(o)
    if o.image is not None:
        pinned_image(o.image, "--image")
    if o.engine_digest is not None:
        pinned_digest(o.engine_digest, "--engine-digest")


def _yaml(obj: dict[str, Any], header: str) -> str:
    return header + yamlout.dump(obj, sort_keys=False, default_flow_style=False)


def write_deployment(
    cell: Cell,
    plan: CellPlan,
    *,
    repository: Path | None,
    engine_key: str,
    out: Path,
    options: DeployOptions,
    host_paths: tuple[Path, ...] = (),
    rule_table: RuleTable | None = None,
) -> DeployResult:
    """Write the build context and manifests for ``cell`` into ``out`` (staged, renamed into place).

    ``repository`` is the emitted Triton repository whose engine paths already point under
    ``options.engines_root`` and which carries its tokenizer (``preprocessing/tokenizer``).
    ``rule_table`` (the diagnosis rules) adds the alerts and dashboard (``toolchain.deploy.observability``).
    """
    o = _with_frontend(cell, options)
    _check_inputs(o, repository, engine_key)
    base = _base_image(cell)
    sizing = _sizing(cell, plan, o)
    app = app_name(cell)
    image = str(pinned_image(o.image or f"{app}:{engine_key[:12]}", "--image"))
    out = Path(out).resolve()
    target = _target(o, app, image, engine_key)
    with owned_output(out, command="deploy", force=o.force) as tmp:
        ctx = tmp / "image"
        _write_image_context(ctx, cell, o, base=base, repository=repository, multi_node=sizing.multi_node)
        _write_manifests(tmp / "k8s", target, cell, sizing, _header(cell, engine_key))
        obs_notes = []
        if rule_table is not None and target.frontend != "trtllm-serve":  # trtllm-serve exports no Prometheus
            obs_notes = write_observability(tmp, target, cell, plan, rule_table, _header(cell, engine_key))
        decision = _decision(cell, o, target, base=str(base), sizing=sizing)
        (tmp / "deploy.json").write_text(json.dumps(decision, indent=2) + "\n")
        leaks = _host_paths_to_refuse(o, (*host_paths, *([repository] if repository else []), tmp, out))
        _refuse_leaks(tmp, leaks, skip=ctx / "src")
        files = _written_files(tmp)
    notes = _notes(image, o.namespace) + obs_notes
    return DeployResult(out, app, image, engine_key, sizing, files, notes, engine_digest=target.engine_digest)


def _with_frontend(cell: Cell, options: DeployOptions) -> DeployOptions:
    """The checked options with the runtime's default frontend filled in; refuse a frontend of the other runtime."""
    o = options
    check_options(o)
    if o.frontend is None:
        o = dataclasses.replace(o, frontend="trtllm-serve" if cell.spec.runtime == "pytorch" else "openai")
    if (cell.spec.runtime == "pytorch") != (o.frontend == "trtllm-serve"):
        raise DeployError(
            f"runtime {cell.spec.runtime} is not served by frontend {o.frontend}",
            "runtime pytorch is served by trtllm-serve; runtime tensorrt by openai or kserve",
        )
    return o


def _check_inputs(o: DeployOptions, repository: Path | None, engine_key: str) -> None:
    """Refuse a repository the frontend does not serve and an engine key that is not a full one."""
    if (repository is None) != (o.frontend == "trtllm-serve"):
        raise DeployError("a Triton model repository goes with the Triton frontends only", "report this as a bug")
    if not re.fullmatch(r"[0-9a-f]{64}", engine_key):
        raise DeployError(
            f"engine key '{engine_key}' is not a full 64-hex key", "resolve it with `toolchain cache show`"
        )


def _base_image(cell: Cell) -> ImageRef:
    """The pinned image the build context is FROM: the spec's target.container."""
    if not cell.spec.target.container:
        raise DeployError(
            f"spec '{cell.spec.name}' names no target.container to build the image FROM",
            "set target.container to e.g. nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:<digest>",
        )
    return pinned_image(cell.spec.target.container, "target.container")


def _sizing(cell: Cell, plan: CellPlan, o: DeployOptions) -> Sizing:
    """The cell's pod and fleet sizing; refuse a trtllm-serve replica that spans nodes."""
    sizing = size_cell(
        cell, plan, gpus_per_node=o.gpus_per_node, min_replicas=o.min_replicas, max_replicas=o.max_replicas
    )
    if sizing.multi_node and o.frontend == "trtllm-serve":
        raise DeployError(
            f"a pytorch-runtime replica of {sizing.ranks} GPUs spans {sizing.nodes_per_replica} nodes; "
            "`toolchain deploy` runs trtllm-serve on one node",
            "raise --gpus-per-node to the GPUs of your nodes, or lower TP x PP",
        )
    return sizing


def _target(o: DeployOptions, app: str, image: str, engine_key: str) -> Target:
    """What the manifests deploy: the app, its image, the engine and where the pod finds them."""
    return Target(
        app=app,
        image=image,
        engine_key=engine_key,
        registry=_registry_in_pod(o),
        registry_secret=o.registry_secret,
        registry_pvc=o.registry_pvc,
        frontend=str(o.frontend),
        engines_root=o.engines_root,
        model_repository=f"{o.image_root.rstrip('/')}/model_repository",
        queue_target_ms=o.queue_target_ms,
        prometheus_url=o.prometheus_url,
        namespace=o.namespace or DEFAULT_NAMESPACE,
        engine_digest=o.engine_digest,  # in its one form (pipeline.fleet pins it)
    )


def _header(cell: Cell, engine_key: str) -> str:
    """The comment at the top of every manifest: what it deploys and the pinned versions it is written for."""
    return (
        f"# toolchain deploy: {cell.spec.name} cell {cell.id}, engine {engine_key[:16]}; written for Kubernetes "
        f"{PINNED['kubernetes']} (KEDA {PINNED['keda']}, prometheus-operator {PINNED['prometheus-operator']}, "
        f"LeaderWorkerSet {PINNED['lws']})\n"
    )


def _write_image_context(
    ctx: Path, cell: Cell, o: DeployOptions, *, base: ImageRef, repository: Path | None, multi_node: bool
) -> None:
    """The docker build context: model repository, entrypoint scripts, toolchain source, Dockerfile."""
    ctx.mkdir()
    if repository is not None:
        shutil.copytree(repository, ctx / "model_repository", ignore=shutil.ignore_patterns("__pycache__"))
    for script in (ENTRYPOINT, KUBESSH):
        shutil.copyfile(script, ctx / script.name)
        os.chmod(ctx / script.name, 0o755)
    copy_source(ctx / "src")
    if o.public_key_pem is not None:
        (ctx / "cosign.pub").write_bytes(o.public_key_pem)
    readable_by_all(ctx)  # the image's non-root user reads what COPY puts in (a temporary dir is mode 0700)
    (ctx / "Dockerfile").write_text(
        dockerfile(
            base,
            trtllm_version=cell.spec.target.trtllm_version,
            image_root=o.image_root,
            engines_root=o.engines_root,
            repository=repository is not None,
            kubectl_minor=".".join(PINNED["kubernetes"].split(".")[:2]) if multi_node else None,
            public_key=o.public_key_pem is not None,
        )
    )
    (ctx / ".dockerignore").write_text("**/__pycache__\n**/*.pyc\n")


def _write_manifests(k8s: Path, target: Target, cell: Cell, sizing: Sizing, header: str) -> None:
    """The Kubernetes manifests and the kustomization that lists them."""
    k8s.mkdir()
    res = manifests(target, cell, sizing)
    for name, obj in res.items():
        (k8s / name).write_text(_yaml(obj, header))
    (k8s / "kustomization.yaml").write_text(_yaml(kustomization(target, list(res)), header))


def _decision(cell: Cell, o: DeployOptions, target: Target, *, base: str, sizing: Sizing) -> dict[str, Any]:
    """deploy.json: what was decided and why, and the commands to run next."""
    image = target.image
    return {
        "spec": cell.spec.name,
        "cell": cell.id,
        "engine_key": target.engine_key,
        "engine_digest": target.engine_digest,  # null: the pods pull whatever manifest the key names
        "app": target.app,
        "base_image": base,
        "image": image,
        "registry": target.registry,
        "registry_secret": o.registry_secret,
        "frontend": o.frontend,
        "engines_root": o.engines_root,
        "pinned": PINNED,
        "sizing": sizing.to_json(),
        "sizing_explained": sizing.explain(),
        "next": next_commands(image),
    }


def _host_paths_to_refuse(o: DeployOptions, paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """Every host path that went in, except those holding the image or engines root (a test may lay the
    image out on this machine to run the entrypoint)."""
    roots = (o.image_root, o.engines_root)
    return tuple(p for p in paths if not any(r.startswith(str(p.resolve())) for r in roots))


def _written_files(tmp: Path) -> list[str]:
    """The files written under ``tmp``, relative and sorted, leaving out the copied toolchain source."""
    return sorted(
        str(p.relative_to(tmp))
        for p in tmp.rglob("*")
        if p.is_file() and p.relative_to(tmp).parts[:2] != ("image", "src")
    )


def next_commands(image: str) -> list[str]:
    """What to run after writing: build and push the image by tag, or, for an image named by digest (already
    built from this context and pushed), only apply."""
    if "@" in image:
        return ["kubectl apply -k k8s"]
    return [f"docker build -t {image} image", f"docker push {image}", "kubectl apply -k k8s"]


def _notes(image: str, namespace: str | None) -> list[str]:
    """Advice on the chosen image (Docker Hub, a tag rather than a digest) and on the namespace."""
    notes = []
    if registry_host(image) is None:
        notes.append(
            f"image {image} names no registry host: `docker push` sends it to Docker Hub and nodes pull it from "
            "there; pass --image REGISTRY/REPOSITORY:TAG (e.g. registry.example.com/llm/app:1) for your own registry"
        )
    if "@" in image:
        notes.append(
            f"image {image} is named by digest: it must be the image built from this image/ context (build and "
            "push it by tag once; the push prints the digest)"
        )
    else:
        repo = image.rsplit(":", 1)[0]
        notes.append(
            f"image {image} is named by tag, which can be moved (pods pull it Always); after `docker push` pin the "
            f"digest it printed: `(cd k8s && kustomize edit set image {repo}@sha256:DIGEST)`, or write the "
            f"deployment with --image {repo}@sha256:DIGEST"
        )
    if namespace is None:
        notes.append(
            f"no --namespace: the manifests name namespace '{DEFAULT_NAMESPACE}' (the autoscaler's query is scoped "
            "to it, and kubectl refuses another); pass --namespace NS to deploy elsewhere"
        )
    return notes


def _refuse_leaks(root: Path, host_paths: tuple[Path, ...], *, skip: Path) -> None:
    """No host path and no image tagged ``latest`` in anything written (the toolchain source is copied as is)."""
    needles = sorted({str(p.resolve()) for p in host_paths if str(p.resolve()) not in ("/", "")}, key=len)
    for f in root.rglob("*"):
        if not f.is_file() or skip in f.parents:
            continue
        text = f.read_text(errors="replace")
        for n in needles:
            if n in text:
                raise DeployError(
                    f"{f.relative_to(root)} would contain the host path {n}", "report this as a toolchain bug"
                )
        if LATEST.search(text):
            raise DeployError(f"{f.relative_to(root)} would name an image tag 'latest'", "pin every image tag")
