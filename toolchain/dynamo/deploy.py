"""A DynamoGraphDeployment (``nvidia.com/v1beta1``) for a spec's Dynamo block, sized by the Dynamo plan.

Components (v1beta1 ``spec.components[]``: ``name``, ``type``, ``replicas``, ``podTemplate`` whose container is
named ``main``; docs/dynamo.md): a ``frontend`` running ``python3 -m dynamo.frontend`` and, disaggregated,
``prefill`` and ``decode`` workers running ``python3 -m dynamo.trtllm --disaggregation-mode prefill|decode``
(aggregated: one ``worker`` component), each with ``--extra-engine-args`` naming its LLM-API options file from
a ConfigMap: the spec's KV-cache, CUDA-graph, chunked-prefill and scheduler options (toolchain.specs.llmapi)
plus ``cache_transceiver_config``, and on prefill workers ``disable_overlap_scheduler: true`` (TensorRT-LLM's
overlap scheduler is not supported on prefill-only workers). ``nvidia.com/gpu`` per worker = its TP. Pods run
under the ``restricted`` Pod Security Standard (non-root, no privilege escalation, every capability dropped,
RuntimeDefault seccomp), with writable emptyDirs for the caches. A NetworkPolicy beside it selects the pods the
operator makes for the graph by its graph-name label (:func:`network_policy`).
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain import yamlout
from toolchain.deploy import core
from toolchain.deploy.sizing import ENGINE_OVERHEAD
from toolchain.dynamo.plan import DynamoPlan, PoolPlan
from toolchain.errors import DeployError
from toolchain.outdir import check_output, write_output
from toolchain.specs.dynamo import RELEASES
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec

if TYPE_CHECKING:
    from toolchain.dynamo import observability

API_VERSION = "nvidia.com/v1beta1"
KIND = "DynamoGraphDeployment"
HTTP_PORT = 8000
SYSTEM_PORT = 9090  # DYN_SYSTEM_PORT: the worker's /health and /metrics
TRANSCEIVER = {"default": "DEFAULT", "nixl": "NIXL", "ucx": "UCX"}
COMPONENT = {"workers": ("worker", "worker"), "prefill": ("prefill", "prefill"), "decode": ("decode", "decode")}
MODE_FLAG = {"workers": "agg", "prefill": "prefill", "decode": "decode"}
# The label the Dynamo operator puts on every pod it makes for a graph, valued with the DynamoGraphDeployment's name
# (docs/dynamo.md, "NetworkPolicy": ai-dynamo/dynamo deploy/operator/internal/consts/consts.go
# KubeLabelDynamoGraphDeploymentName; the 1.6.1 wheel's planner lists a graph's pods by it)
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
MODELS = "/models"  # the emptyDir an init container restores the registry artifact into
KEYS = "/etc/toolchain/keys"  # the public key the pull step verifies signatures with (a ConfigMap)


@dataclass(frozen=True)
class Artifact:
    """An LLM-API artifact (``hf/`` + options) in the registry, pulled and verified by an init container."""

    key: str  # full registry key
    registry: str  # s3://..., hf://... or oci://... (the pods cannot read this machine's paths)
    image: str  # an image with the toolchain installed (the one `toolchain deploy` builds)
    secret: str | None = None  # Secret with the registry credentials (AWS_*, HF_TOKEN), as envFrom
    public_key_pem: bytes | None = None  # the pull requires a valid signature by this key (docs/signing.md)
    digest: str | None = None  # sha256:... of the manifest the pull must find (`cache pull --digest`); None: by key

    @property
    def model_path(self) -> str:
        return f"{MODELS}/{self.key}/hf"


# The Secret Dynamo's Kubernetes recipes read HF_TOKEN from (ai-dynamo/dynamo recipes/*/deploy.yaml: envFrom
# secretRef hf-token-secret; `kubectl create secret generic hf-token-secret --from-literal=HF_TOKEN=...`).
HF_TOKEN_SECRET = "hf-token-secret"


def precision_mismatch(spec: EngineSpec, artifact: Artifact | None) -> tuple[str, str] | None:
    """(what, fix) when the workers would serve something other than what the plan assumed: without an
    artifact, the Hub model as it is published (unquantized, KV dtype auto) for a spec that plans quantized
    weights. None when they serve what was planned."""
    from toolchain.artifacts.recipe import is_unquantized

    if artifact is not None or is_unquantized(spec):
        return None
    q = spec.quantization
    return (
        f"the plan sized the pools for {q.weights} weights and a {q.kv_cache} KV cache, but without --engine the "
        "workers would serve the spec's model as the Hub publishes it (unquantized, kv_cache_config.dtype auto)",
        "pass --engine KEY of the spec's quantized LLM-API bundle (`toolchain build SPEC --cell ID`, `toolchain "
        "cache push`) with --registry, or --model-path of a quantized checkpoint (`toolchain dynamo deploy "
        "--allow-unquantized` serves the unquantized model anyway)",
    )


POD_REGISTRIES = ("s3://", "hf://", "oci://")  # what the pull init container (`toolchain cache pull`) reads


def check_registry(registry: str) -> None:
    """The registry the pods pull from: one they can reach (the same schemes `toolchain deploy` accepts)."""
    if registry.startswith(POD_REGISTRIES):
        return
    if "://" in registry:
        raise DeployError(
            f"registry '{registry}' is not s3://, hf:// or oci://",
            "use s3://bucket/prefix, hf://org/repo or oci://host/repository",
        )
    raise DeployError(
        f"--registry {registry} is a path of this machine, which the pods cannot read",
        "push the artifact to an s3://, hf:// or oci:// registry (`toolchain cache push`) and name that",
    )


def check_artifact(a: Artifact) -> None:
    check_registry(a.registry)
    if len(a.key) != 64 or any(c not in "0123456789abcdef" for c in a.key):
        raise DeployError(f"--engine {a.key[:80]!r} is not a full registry key", "see `toolchain cache ls`")


def engine_args(cell: Cell, pool: PoolPlan) -> dict[str, Any]:
    """The LLM-API options (``--extra-engine-args`` YAML) of one pool's workers."""
    from toolchain.specs.llmapi import llmapi_options

    d = cell.spec.dynamo
    assert d is not None
    opts = llmapi_options(cell)
    opts["tensor_parallel_size"] = pool.tp
    if d.disaggregated:
        ct: dict[str, Any] = {"backend": TRANSCEIVER[d.kv_transfer]}
        if d.max_tokens_in_buffer is not None:
            ct["max_tokens_in_buffer"] = d.max_tokens_in_buffer
        opts["cache_transceiver_config"] = ct
    if pool.role == "prefill":
        opts["disable_overlap_scheduler"] = True
    return opts


def worker_command(cell: Cell, pool: PoolPlan, *, model: str, args_file: str) -> list[str]:
    """``python3 -m dynamo.trtllm ...`` of one pool (its flags are dynamo/trtllm/backend_args.py's)."""
    d = cell.spec.dynamo
    assert d is not None
    cmd = [
        "python3", "-m", "dynamo.trtllm",
        "--model", model,
        "--served-model-name", cell.spec.name,
        "--extra-engine-args", args_file,
        "--disaggregation-mode", MODE_FLAG[pool.role],
        "--tensor-parallel-size", str(pool.tp),
        "--kv-block-size", str(cell.spec.build.tokens_per_block),
    ]  # fmt: skip
    if d.router == "kv" and pool.role != "decode":
        cmd.append("--publish-kv-events")
    return cmd


def frontend_command(cell: Cell) -> list[str]:
    d = cell.spec.dynamo
    assert d is not None
    return [
        "python3", "-m", "dynamo.frontend",
        "--http-port", str(HTTP_PORT),
        "--router-mode", d.router,
        "--kv-cache-block-size", str(cell.spec.build.tokens_per_block),
    ]  # fmt: skip


def _security() -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod, container) security contexts of the ``restricted`` Pod Security Standard: the deploy core's, which
    every pod the toolchain writes shares (toolchain.deploy.core)."""
    return core.pod_security(), core.container_security()


def _container(image: str, cmd: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    _pod, sec = _security()
    return {
        "name": "main",
        "image": image,
        "imagePullPolicy": core.image_pull_policy(image),  # a tag may have moved since the node pulled it
        "command": cmd[:1],
        "args": cmd[1:],
        "env": env,
        "resources": copy.deepcopy(core.HELPER_RESOURCES),  # a worker's are its GPUs' (dgd)
        "securityContext": sec,
        "volumeMounts": [{"name": "home", "mountPath": "/home/dynamo"}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def _pod_template(container: dict[str, Any], volumes: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, Any]:
    pod_sec, _ = _security()
    return {
        "metadata": {"labels": labels},
        "spec": {
            "securityContext": pod_sec,
            "automountServiceAccountToken": False,  # nothing in the pod talks to the API server
            "containers": [container],
            "volumes": [{"name": "home", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}, *volumes],
        },
    }


def _pull_container(a: Artifact) -> dict[str, Any]:
    """``toolchain cache pull`` of the artifact into the models emptyDir: every file's digest is verified, and a
    corrupt or missing entry fails the pod before the worker starts; with the artifact's digest, so does any
    manifest but the one deployed (a replaced entry, exit 6)."""
    _pod, sec = _security()
    c: dict[str, Any] = {
        "name": "pull",
        "image": a.image,
        "imagePullPolicy": core.image_pull_policy(a.image),
        "command": ["python3", "-m", "toolchain.cli.main", "cache", "pull", a.key, f"{MODELS}/{a.key}"],
        "args": ["--registry", a.registry]
        + (["--digest", a.digest] if a.digest else [])  # the manifest deployed, not whatever the key names later
        + (["--require-signature", "--public-key", f"{KEYS}/cosign.pub"] if a.public_key_pem else []),
        "env": _env(),
        "resources": copy.deepcopy(core.HELPER_RESOURCES),
        "securityContext": sec,
        "volumeMounts": [{"name": "models", "mountPath": MODELS}, {"name": "home", "mountPath": "/home/dynamo"}],
    }
    if a.secret:
        c["envFrom"] = [{"secretRef": {"name": a.secret, "optional": False}}]
    if a.public_key_pem:
        c["volumeMounts"].append({"name": "signing-key", "mountPath": KEYS, "readOnly": True})
    return c


def _bundle_container(a: Artifact, gpu: str, trtllm: str) -> dict[str, Any]:
    """Checks the pulled warm-start bundle against the GPU the pool is scheduled on and the TensorRT-LLM of the
    image: a bundle made for anything else has its caches moved aside, so the worker starts cold (with one
    warning in this container's log) instead of loading another GPU's autotuner profiles."""
    pull = _pull_container(a)
    return {
        **{k: v for k, v in pull.items() if k not in ("command", "args", "envFrom")},
        "name": "bundle-check",
        "command": ["python3", "-m", "toolchain.artifacts.bundle", f"{MODELS}/{a.key}"],
        "args": ["--gpu", gpu, "--trtllm", trtllm, "--quarantine"],
    }


def _bundle_env(a: Artifact) -> dict[str, str]:
    """The cache variables of the bundle, pointing into the pulled copy (toolchain.artifacts.bundle.CACHE_ENV)."""
    from toolchain.artifacts.bundle import CACHE_ENV

    return {k: f"{MODELS}/{a.key}/{v}" for k, v in CACHE_ENV.items()}


def _env(extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    base = {"HOME": "/home/dynamo", "HF_HOME": "/home/dynamo/.cache/huggingface", **(extra or {})}
    return [{"name": k, "value": v} for k, v in base.items()]


def _dgd_labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "toolchain"}


def dgd(
    cell: Cell,
    plan: DynamoPlan,
    *,
    name: str,
    namespace: str,
    model: str,
    config_map: str,
    artifact: Artifact | None = None,
) -> dict[str, Any]:
    """The DynamoGraphDeployment object."""
    d = cell.spec.dynamo
    assert d is not None
    image = cell.spec.target.container or RELEASES[d.version][1]
    labels = _dgd_labels(name)
    fe = _container(image, frontend_command(cell), _env())
    fe["ports"] = [{"name": "http", "containerPort": HTTP_PORT}]
    components: list[dict[str, Any]] = [
        {
            "name": "frontend",
            "type": "frontend",
            "replicas": d.frontend_replicas,
            "podTemplate": _pod_template(fe, [], labels),
        }
    ]
    for pool in plan.pools:
        cname, ctype = COMPONENT[pool.role]
        args_file = f"/etc/dynamo/{cname}.yaml"
        env = _env(_bundle_env(artifact) if artifact is not None else None)
        c = _container(image, worker_command(cell, pool, model=model, args_file=args_file), env)
        c["volumeMounts"].append({"name": "engine-args", "mountPath": "/etc/dynamo", "readOnly": True})
        # the Triton deployment's rule (toolchain.deploy.core.server_memory): host memory for the weights a rank loads
        weights = max(pool.weight_bytes_per_gpu, pool.weight_read_bytes)
        c["resources"] = core.server_resources(gpus=pool.tp, per_rank_bytes=int(weights * ENGINE_OVERHEAD))
        from toolchain.hardware.catalog import lookup_gpu

        volumes: list[dict[str, Any]] = [{"name": "engine-args", "configMap": {"name": config_map}}]
        if artifact is not None:
            c["volumeMounts"].append({"name": "models", "mountPath": MODELS, "readOnly": True})
            if artifact.secret:
                c["envFrom"] = [{"secretRef": {"name": artifact.secret, "optional": False}}]
            volumes.append({"name": "models", "emptyDir": {}})
            if artifact.public_key_pem:
                volumes.append({"name": "signing-key", "configMap": {"name": f"{name}-signing-key"}})
        elif cell.spec.model.is_hf and model == cell.spec.model.hf_repo_revision()[0]:
            # dynamo.trtllm downloads the Hub model itself; a gated one needs HF_TOKEN, which Dynamo's own
            # recipes take from the Secret hf-token-secret (envFrom). Optional: an open model needs none.
            c["envFrom"] = [{"secretRef": {"name": HF_TOKEN_SECRET, "optional": True}}]
        tmpl = _pod_template(c, volumes, labels)
        if artifact is not None:
            gpu_name = lookup_gpu(pool.gpu).nvml_name
            check = _bundle_container(artifact, gpu_name, cell.spec.target.trtllm_version)
            tmpl["spec"]["initContainers"] = [_pull_container(artifact), check]
        tmpl["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": lookup_gpu(pool.gpu).gfd_product}
        tmpl["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        components.append({"name": cname, "type": ctype, "replicas": pool.replicas, "podTemplate": tmpl})
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"backendFramework": "trtllm", "components": components},
    }


def network_policy(*, name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """Ingress to the graph's pods (every pod the operator makes for DynamoGraphDeployment ``name``, by its
    :data:`GRAPH_LABEL`): the frontend's HTTP port and the components' system port (/metrics, /health) from
    anywhere (clients, Prometheus), and anything from the graph's own pods (requests from the frontend and router
    to the workers, KV events, NIXL transfers between prefill and decode). Egress is left open: NATS, etcd, the
    registry and the Hub are elsewhere. The Triton deployment's policy has the same shape
    (toolchain.deploy.manifests.network_policy)."""
    graph = {"matchLabels": {GRAPH_LABEL: name}}
    ports = [{"protocol": "TCP", "port": HTTP_PORT}, {"protocol": "TCP", "port": SYSTEM_PORT}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "podSelector": graph,
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": ports}, {"from": [{"podSelector": graph}]}],
        },
    }


def config_map(cell: Cell, plan: DynamoPlan, *, name: str, namespace: str) -> dict[str, Any]:
    data = {f"{COMPONENT[p.role][0]}.yaml": yamlout.dump(engine_args(cell, p), sort_keys=False) for p in plan.pools}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def dgd_name(cell: Cell) -> str:
    """The DynamoGraphDeployment's name: a DNS label (the operator names its Services and pods after it and its
    components, so it leaves room for those suffixes), stable for the spec."""
    return core.dns_label(cell.spec.name, limit=40)


def write_dgd(
    cell: Cell,
    plan: DynamoPlan,
    out: Path,
    *,
    namespace: str = "default",
    model_path: str | None = None,
    artifact: Artifact | None = None,
    force: bool = False,
) -> dict[str, Path]:
    """Write the DynamoGraphDeployment, its engine-args ConfigMap, the NetworkPolicy of its pods, its
    PrometheusRule and Grafana dashboard ConfigMap (toolchain.dynamo.observability; the plain rule file and
    dashboard JSON under observability/), a kustomization and the worker commands."""
    if artifact is not None:
        check_artifact(artifact)
        if model_path:
            raise DeployError("--model-path and --engine both name the model", "pass one of them")
        model = artifact.model_path
    elif cell.spec.model.is_hf:
        repo, _rev = cell.spec.model.hf_repo_revision()
        model = model_path or repo  # dynamo.trtllm downloads a Hub id itself (its default branch)
    elif model_path:
        model = model_path
    else:
        raise DeployError(
            f"the spec's model is a local directory ({cell.spec.model.source}), which the pods cannot read",
            "pass --model-path with the checkpoint's path inside the pods (a mounted volume) or its Hub id",
        )
    out = check_output(Path(out), force=force)
    name = dgd_name(cell)
    cm_name = f"{name}-engine-args"
    objs = {
        "configmap.yaml": config_map(cell, plan, name=cm_name, namespace=namespace),
        "dynamographdeployment.yaml": dgd(
            cell, plan, name=name, namespace=namespace, model=model, config_map=cm_name, artifact=artifact
        ),
        "networkpolicy.yaml": network_policy(name=name, namespace=namespace, labels=_dgd_labels(name)),
    }
    from toolchain.dynamo import observability

    obs = observability.build(cell, plan, name=name, namespace=namespace, labels=_dgd_labels(name))
    objs["prometheusrule.yaml"] = obs.prometheus_rule  # the alerts (docs/observability.md, "NVIDIA Dynamo")
    objs["dashboard.yaml"] = obs.configmap  # the Grafana dashboard, for the sidecar that loads labelled ConfigMaps
    if artifact is not None and artifact.public_key_pem:  # a public key: a ConfigMap is the place for it
        objs["signing-key.yaml"] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-signing-key", "namespace": namespace},
            "data": {"cosign.pub": artifact.public_key_pem.decode()},
        }
    return write_output(out, lambda d: _write_dgd_files(d, objs, obs), command="dynamo deploy", force=force)


def _write_dgd_files(out: Path, objs: dict[str, dict[str, Any]], obs: observability.Observability) -> dict[str, Path]:
    from toolchain.dynamo import observability

    files: dict[str, Path] = {}
    for fname, obj in objs.items():
        (out / fname).write_text(yamlout.dump(obj, sort_keys=False))
        files[fname] = out / fname
    kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": list(objs)}
    (out / "kustomization.yaml").write_text(yamlout.dump(kust, sort_keys=False))
    files["kustomization.yaml"] = out / "kustomization.yaml"
    files.update(observability.write(out, obs))
    lines = ["# the worker command lines of the DynamoGraphDeployment, one per component (for review)"]
    for comp in objs["dynamographdeployment.yaml"]["spec"]["components"]:
        main = comp["podTemplate"]["spec"]["containers"][0]
        lines.append(f"{comp['name']}: {shlex.join(main['command'] + main['args'])}")
    (out / "commands.txt").write_text("\n".join(lines) + "\n")
    files["commands.txt"] = out / "commands.txt"
    return files
