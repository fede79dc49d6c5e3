"""Kubernetes manifests for one cell, built as data (dicts) and serialised with yaml.safe_dump.

One replica is one serving instance (TP × PP ranks). A replica that fits one node is a Deployment; one that
spans nodes is a LeaderWorkerSet (leader + workers, one pod per node). Around it: a Service (HTTP, gRPC,
metrics, OpenAI), a ServiceMonitor, a PodDisruptionBudget, a NetworkPolicy and a KEDA ScaledObject that scales
on the mean Triton queue time per request — the signal ``toolchain diagnose`` reads — between the planner's min and max.
Registry credentials come from a Secret by reference (``envFrom.secretRef``); no value is ever written.
The API versions and the cluster version they were validated against are pinned in ``PINNED``.

Every pod meets the Pod Security Standards' ``restricted`` profile: it runs as the non-root user NGC's Triton
images create for this (``triton-server``, uid/gid 1000: triton-inference-server/server ``build.py``), with no
privilege escalation, every capability dropped and the runtime's default seccomp profile. Only the leader of a
multi-node group mounts a service-account token (it lists its group's pods and starts ranks in them with
``kubectl exec``). Memory is requested and limited from the plan (``toolchain.deploy.sizing``). The manifests
always name their namespace (``default`` unless ``--namespace``): the autoscaler's Prometheus query is scoped to
it, and kubectl refuses to apply them to another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolchain.deploy import core
from toolchain.deploy.core import SERVER_UID as SERVER_UID  # re-exported: deploy.context
from toolchain.deploy.sizing import GIB, Sizing
from toolchain.specs.matrix import Cell

# What the manifests are written for and checked against (tests validate offline with these versions).
PINNED = {
    "kubernetes": "1.34.0",
    "keda": "2.20.2",
    "prometheus-operator": "0.93.0",
    "lws": "0.10.0",
}
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
DEFAULT_NAMESPACE = "default"  # where kubectl puts namespace-less objects; written out so the query can name it
QUEUE_MODEL = "tensorrt_llm"  # the model whose queue time `toolchain diagnose` reads


@dataclass(frozen=True)
class Target:
    """Where and how the cell runs: everything the manifests need besides the sizing."""

    app: str
    image: str  # repository:tag (never latest) or repository@sha256:...
    engine_key: str
    registry: str  # s3://..., hf://..., or a path inside the pod (a mounted volume)
    registry_secret: str | None
    registry_pvc: str | None
    frontend: str  # openai | kserve
    engines_root: str
    model_repository: str
    queue_target_ms: float
    prometheus_url: str
    namespace: str | None = None
    engine_digest: str | None = None  # the manifest the pod's pull is pinned to (ENGINE_DIGEST); None: by key only


def app_name(cell: Cell) -> str:
    """A DNS-1035 label (<= 63 chars) naming the cell's workload, stable for the cell."""
    return core.dns_label(f"{cell.spec.name}-{cell.id}")


def namespace(t: Target) -> str:
    """The namespace the manifests are written for (and the autoscaler's query is scoped to)."""
    return t.namespace or DEFAULT_NAMESPACE


def _labels(t: Target, cell: Cell) -> dict[str, str]:
    return core.labels(t.app, "llm-server", engine_key=t.engine_key, gpu=cell.gpu.name)


def _selector(t: Target) -> dict[str, str]:
    return {"app.kubernetes.io/name": t.app}


def _meta(t: Target, cell: Cell, name: str | None = None) -> dict[str, Any]:
    return {"name": name or t.app, "labels": _labels(t, cell)}


def _quantity(n: int) -> str:
    return f"{n // GIB}Gi" if n % GIB == 0 else f"{-(-n // 2**20)}Mi"


def _env(t: Target, cell: Cell, s: Sizing) -> list[dict[str, Any]]:
    env = [
        {"name": "TOOLCHAIN_REGISTRY", "value": t.registry},
        {"name": "ENGINE_KEY", "value": t.engine_key},
        {"name": "ENGINES_ROOT", "value": t.engines_root},
        # a writable home for caches whatever the image's passwd says about uid 1000 (the engines volume)
        {"name": "HOME", "value": f"{t.engines_root.rstrip('/')}/.home"},
        {"name": "TOOLCHAIN_MODEL_REPOSITORY", "value": t.model_repository},
        {"name": "TOOLCHAIN_WORLD_SIZE", "value": str(s.ranks)},
        {"name": "TOOLCHAIN_TP", "value": str(cell.tp)},
        {"name": "TOOLCHAIN_PP", "value": str(cell.pp)},
        {"name": "TOOLCHAIN_FRONTEND", "value": t.frontend},
        {"name": "READY_TIMEOUT", "value": str(s.startup_budget_s)},
        {"name": "SERVE_HOST", "value": "0.0.0.0"},
        {"name": "HTTP_PORT", "value": str(PORTS["http"])},
        {"name": "GRPC_PORT", "value": str(PORTS["grpc"])},
        {"name": "METRICS_PORT", "value": str(PORTS["metrics"])},
        {"name": "OPENAI_PORT", "value": str(PORTS["openai"])},
    ]
    if t.engine_digest:  # the entrypoint's pull refuses any other manifest under the key (`cache pull --digest`)
        env.insert(2, {"name": "ENGINE_DIGEST", "value": t.engine_digest})
    return env


def _probe(path: str, period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def container_ports(t: Target) -> list[dict[str, Any]]:
    if t.frontend == "trtllm-serve":  # one port: OpenAI routes and /health
        names = ["http"]
    else:
        names = ["http", "grpc", "openai"] if t.frontend == "openai" else ["http", "grpc", "metrics"]
    return [{"name": n, "containerPort": PORTS[n], "protocol": "TCP"} for n in names]


def metrics_port(t: Target) -> str:
    """The OpenAI frontend serves Triton's Prometheus metrics on its own port; tritonserver on 8002."""
    return "openai" if t.frontend == "openai" else "metrics"


def pod_spec(t: Target, cell: Cell, s: Sizing, *, gpus: int, role: str = "server") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "server",
        "image": t.image,
        # a digest names one image for good; a tag may have moved since the node pulled it
        "imagePullPolicy": core.image_pull_policy(t.image),
        "args": [role],
        "env": _env(t, cell, s),
        "ports": container_ports(t) if role != "worker" else [],
        "resources": {
            "requests": {"cpu": str(max(4, 4 * gpus)), "memory": _quantity(s.memory_request_bytes)},
            "limits": {"nvidia.com/gpu": str(gpus), "memory": _quantity(s.memory_limit_bytes)},
        },
        "securityContext": core.container_security(),
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "engines", "mountPath": t.engines_root},
        ],
    }
    if role != "worker":
        # trtllm-serve (runtime pytorch) has only /health; Triton has live and ready
        ready, live = (
            ("/health", "/health") if t.frontend == "trtllm-serve" else ("/v2/health/ready", "/v2/health/live")
        )
        container["startupProbe"] = _probe(ready, s.startup_period_s, s.startup_failure_threshold)
        container["readinessProbe"] = _probe(ready, 5, 3)
        container["livenessProbe"] = _probe(live, 10, 3)
    else:
        # a worker is ready once its engine is restored, verified and linted (the file the leader waits for);
        # its ranks are the leader's mpirun's, so a failed rank fails the leader and the group is recreated
        container["readinessProbe"] = {
            "exec": {"command": ["test", "-f", f"{t.engines_root.rstrip('/')}/.ready-{t.engine_key}"]},
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    if t.registry_secret:
        container["envFrom"] = core.secret_env(t.registry_secret)
    if s.multi_node:
        container["env"] += [
            {"name": "TOOLCHAIN_NODES", "value": str(s.nodes_per_replica)},
            {"name": "TOOLCHAIN_GPUS_PER_NODE", "value": str(s.gpus_per_node)},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {
                "name": "GROUP_KEY",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/group-key']"}},
            },
        ]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(s.shm_bytes)}},
        {"name": "engines", "emptyDir": {"sizeLimit": _quantity(s.engine_volume_bytes)}},
    ]
    if t.registry_pvc:
        container["volumeMounts"].append({"name": "registry", "mountPath": t.registry, "readOnly": True})
        volumes.append({"name": "registry", "persistentVolumeClaim": {"claimName": t.registry_pvc, "readOnly": True}})
    pod: dict[str, Any] = {
        "nodeSelector": {core.GPU_PRODUCT_LABEL: cell.gpu.gfd_product},
        "tolerations": [dict(core.GPU_TOLERATION)],
        "terminationGracePeriodSeconds": 60,
        # the engines volume is writable by the server, without a recursive chown of it at each start
        "securityContext": core.pod_security(),
        "automountServiceAccountToken": role == "leader",
        "containers": [container],
        "volumes": volumes,
    }
    if role == "leader":
        pod["serviceAccountName"] = t.app  # the leader's mpirun starts ranks in the workers with kubectl exec
    return pod


def workload(t: Target, cell: Cell, s: Sizing) -> dict[str, Any]:
    labels = _labels(t, cell)
    if not s.multi_node:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(t, cell),
            "spec": {
                "replicas": s.min_replicas,
                "selector": {"matchLabels": _selector(t)},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec(t, cell, s, gpus=s.ranks)},
            },
        }
    per_node = s.gpus_per_node
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(t, cell),
        "spec": {
            "replicas": s.min_replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": s.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": labels},
                    "spec": pod_spec(t, cell, s, gpus=per_node, role="leader"),
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, "app.kubernetes.io/component": "llm-worker"}},
                    "spec": pod_spec(t, cell, s, gpus=per_node, role="worker"),
                },
            },
        },
    }


def service(t: Target, cell: Cell) -> dict[str, Any]:
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in container_ports(t)
    ]
    for p in ports:
        if p["name"] == "grpc":
            p["appProtocol"] = "kubernetes.io/h2c"
    selector = {**_selector(t)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(t, cell),
        "spec": {
            "type": "ClusterIP",
            "selector": {**selector, "app.kubernetes.io/component": "llm-server"},
            "ports": ports,
        },
    }


def service_monitor(t: Target, cell: Cell) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(t, cell),
        "spec": {
            "selector": {"matchLabels": _selector(t)},
            "endpoints": [{"port": metrics_port(t), "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}],
        },
    }


def pdb(t: Target, cell: Cell) -> dict[str, Any]:
    """At most one pod of the workload evicted at a time, over every pod: a Deployment's replicas, or each
    group's leader and workers. Evicting one pod of a group takes its whole group down (the LeaderWorkerSet's
    ``RecreateGroupOnPodRestart`` recreates all of it), and its pods count as unavailable until the group is
    back, so drains take one group at a time and the others keep serving."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(t, cell),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector(t)}},
    }


def network_policy(t: Target, cell: Cell) -> dict[str, Any]:
    """Ingress to the workload's pods: its serving and metrics ports from anywhere (clients, Prometheus), and
    anything from the workload's own pods (a multi-node group's MPI and NCCL traffic). Egress is left open:
    the pods pull their engine from the registry."""
    ports = [{"protocol": "TCP", "port": p["containerPort"]} for p in container_ports(t)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(t, cell),
        "spec": {
            "podSelector": {"matchLabels": _selector(t)},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": ports}, {"from": [{"podSelector": {"matchLabels": _selector(t)}}]}],
        },
    }


def queue_query(t: Target) -> str:
    """Mean Triton queue time per request (ms) over the cell's pods: what `toolchain diagnose` compares with
    its 200 ms "undersized" threshold (nv_inference_queue_duration_us ÷ nv_inference_request_success)."""
    sel = f'model="{QUEUE_MODEL}",service="{t.app}",namespace="{namespace(t)}"'
    return (
        f"sum(rate(nv_inference_queue_duration_us{{{sel}}}[2m])) / "
        f"clamp_min(sum(rate(nv_inference_request_success{{{sel}}}[2m])), 0.001) / 1000"
    )


def scaled_object(t: Target, cell: Cell, s: Sizing, workload_obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(t, cell),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": workload_obj["apiVersion"],
                "kind": workload_obj["kind"],
                "name": t.app,
            },
            "minReplicaCount": s.min_replicas,
            "maxReplicaCount": s.max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": 600,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        # a new replica takes the startup budget to serve: do not flap while it loads
                        "scaleUp": {"stabilizationWindowSeconds": 60},
                        "scaleDown": {"stabilizationWindowSeconds": max(600, s.startup_budget_s)},
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": t.prometheus_url,
                        "query": queue_query(t),
                        "threshold": f"{t.queue_target_ms:g}",
                    },
                }
            ],
        },
    }


def rbac(t: Target, cell: Cell) -> dict[str, dict[str, Any]]:
    """What the leader of a multi-node group needs: list the group's pods, exec into them (kubessh)."""
    return {
        "serviceaccount.yaml": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(t, cell)},
        "role.yaml": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(t, cell),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            ],
        },
        "rolebinding.yaml": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(t, cell),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": t.app},
            "subjects": [{"kind": "ServiceAccount", "name": t.app}],
        },
    }


def manifests(t: Target, cell: Cell, s: Sizing) -> dict[str, dict[str, Any]]:
    """File name → resource, in apply order."""
    work = workload(t, cell, s)
    kind = "leaderworkerset" if s.multi_node else "deployment"
    if t.frontend == "trtllm-serve":
        # trtllm-serve's /metrics is JSON, not Prometheus, and has no queue time: nothing to scrape or scale on,
        # so the fleet runs at the planner's max
        work["spec"]["replicas"] = s.max_replicas
        return {
            f"{kind}.yaml": work,
            "service.yaml": service(t, cell),
            "pdb.yaml": pdb(t, cell),
            "networkpolicy.yaml": network_policy(t, cell),
        }
    return {
        **(rbac(t, cell) if s.multi_node else {}),
        f"{kind}.yaml": work,
        "service.yaml": service(t, cell),
        "servicemonitor.yaml": service_monitor(t, cell),
        "pdb.yaml": pdb(t, cell),
        "scaledobject.yaml": scaled_object(t, cell, s, work),
        "networkpolicy.yaml": network_policy(t, cell),
    }


def kustomization(t: Target, files: list[str]) -> dict[str, Any]:
    named, _, digest = t.image.partition("@")
    path, _, last = named.rpartition("/")
    name, _, tag = last.partition(":")
    repo = f"{path}/{name}" if path else name
    image: dict[str, Any] = (
        {"name": repo, "digest": digest} if digest else {"name": repo, "newTag": tag}
    )  # `kustomize edit set image` changes it; a tag stays pinned, a digest exact
    k: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": files,
        "images": [image],
    }
    k["namespace"] = namespace(t)
    return k
