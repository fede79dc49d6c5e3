"""`toolchain matrix --format argo`: the engine matrix as one Argo Workflows ``Workflow`` (argoproj.io/v1alpha1).

A DAG (argo-workflows.readthedocs.io "DAG"): one task per quantize group still needed, one task per cell not
in the registry that depends on its group's task (when it has one), and a final ``tag-set`` task that depends on
every build and tags the set in the registry (`toolchain job tag`). Each task runs `toolchain job` with
``--index`` over the same index files the Kubernetes Jobs use, mounted from the ConfigMaps written beside the
Workflow; tasks of a GPU type run on that GPU's node pool with TP × PP GPUs. The pods are the Jobs' pods:
restricted pod security (``podSpecPatch``-free: the template's ``securityContext`` and the Workflow's
``securityContext``), the registry Secret by reference, ``retryStrategy`` that retries errors and failures
except the toolchain's deterministic exit codes (exit 75, a transient failure, always, with a growing backoff),
``activeDeadlineSeconds`` per task from the build timeout.
"""

from __future__ import annotations

from typing import Any

from toolchain.deploy import core
from toolchain.pipeline.kube_jobs import (
    CELLS_MOUNT,
    CONTAINER,
    FAIL_FAST_EXIT_CODES,
    RETRY_EXIT_CODES,
    WORK_ROOT,
    ClusterMatrix,
    GpuWork,
    JobOptions,
    _check_options,
    _digest,
    configmap,
    index_entries,
    job_command,
)

API_VERSION = "argoproj.io/v1alpha1"


def _template(name: str, kind: str, work: GpuWork, gpus: int, cells_cm: str, o: JobOptions) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": o.image,
        "imagePullPolicy": core.image_pull_policy(o.image),
        "command": [*job_command(kind, o), "--index", "{{inputs.parameters.index}}"],
        "env": [
            {"name": "TOOLCHAIN_REGISTRY", "value": o.registry},
            {"name": "TOOLCHAIN_CACHE", "value": f"{WORK_ROOT}/cache"},
            {"name": "HOME", "value": f"{WORK_ROOT}/home"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "resources": {
            "requests": {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi"},
            "limits": {core.GPU_RESOURCE: str(gpus), "memory": f"{64 * gpus}Gi"},
        },
        "securityContext": core.container_security(),
        "volumeMounts": [
            {"name": cells_cm, "mountPath": CELLS_MOUNT, "readOnly": True},
            {"name": "work", "mountPath": WORK_ROOT},
        ],
    }
    if o.model_volume is not None:
        container["volumeMounts"].append(o.model_volume.mount())
    if o.registry_secret:
        container["envFrom"] = core.secret_env(o.registry_secret)
    timeout = o.build_timeout_s + o.quantize_timeout_s if kind == "build" else o.quantize_timeout_s
    codes = "|".join(str(c) for c in FAIL_FAST_EXIT_CODES)
    return {
        "name": name,
        "inputs": {"parameters": [{"name": "index"}]},
        "nodeSelector": dict(work.pool.node_selector),
        "tolerations": [dict(t) for t in work.pool.tolerations],
        "activeDeadlineSeconds": timeout,
        "retryStrategy": {
            "limit": str(o.retries),
            "retryPolicy": "Always",  # a failed pod and a lost node alike, except:
            "expression": f"asInt(lastRetry.exitCode) in [{', '.join(str(c) for c in RETRY_EXIT_CODES)}] || "
            f"!(asInt(lastRetry.exitCode) in [{codes.replace('|', ', ')}])",
            # a registry or Hub that is down now may be back in minutes: wait longer before each try
            "backoff": {"duration": "30s", "factor": "2", "maxDuration": "30m"},
        },
        "volumes": [{"name": "work", "emptyDir": {}}, *([o.model_volume.volume()] if o.model_volume else [])],
        "container": container,
    }


def workflow(cm: ClusterMatrix, o: JobOptions, *, tag: str | None = None) -> dict[str, dict[str, Any]]:
    """File name → object: the cells ConfigMaps, then ``workflow.yaml``."""
    _check_options(o)
    files: dict[str, dict[str, Any]] = {}
    templates: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    builds: list[str] = []
    volumes: list[dict[str, Any]] = []
    set_digest = _digest(
        [[index_entries("build", w), index_entries("quantize", w)] for _, w in sorted(cm.by_gpu.items())]
        + [o.image, o.registry]
    )
    for where, work in sorted(cm.by_gpu.items()):
        if not work.build and not work.quantize:
            continue
        gpu = work.gpu
        base = core.dns_label(f"tc-{where}", limit=40)
        cells_cm = f"{base}-cells-{set_digest}"
        files[f"{base}-cells.yaml"] = configmap(cells_cm, core.labels(base, "build-cells", gpu=gpu), work, cm, o)
        volumes.append({"name": cells_cm, "configMap": {"name": cells_cm}})
        qtask = {}
        for kind in ("quantize", "build"):
            entries = getattr(work, kind)
            if not entries:
                continue
            tname = f"{base}-{kind}"
            templates.append(_template(tname, kind, work, work.gpus, cells_cm, o))
            for i, e in enumerate(entries):
                task_name = core.dns_label(f"{kind[0]}-{e['id']}", limit=63, prefix="t-")
                t: dict[str, Any] = {
                    "name": task_name,
                    "template": tname,
                    "arguments": {"parameters": [{"name": "index", "value": str(i)}]},
                }
                if kind == "quantize":
                    qtask[e["quantized_key"]] = task_name
                else:
                    dep = _quantize_task(e, cm, qtask)
                    if dep:
                        t["dependencies"] = [dep]
                    builds.append(task_name)
                tasks.append(t)
    if not tasks:
        return files
    tag_name = tag or f"set-{set_digest}"
    templates.append(_tag_template(cm, o, tag_name, volumes))
    tasks.append({"name": "tag-set", "template": "tag-set", "dependencies": builds})
    templates.insert(0, {"name": "matrix", "dag": {"tasks": tasks}})
    meta: dict[str, Any] = {
        "generateName": "toolchain-engines-",
        "labels": core.labels("toolchain-engines", "engine-matrix"),
    }
    if o.namespace:
        meta["namespace"] = o.namespace
    if o.queue:
        meta["labels"]["kueue.x-k8s.io/queue-name"] = o.queue
    spec: dict[str, Any] = {
        "entrypoint": "matrix",
        "securityContext": core.pod_security(),
        "automountServiceAccountToken": False,
        "volumes": volumes,
        "ttlStrategy": {"secondsAfterCompletion": o.ttl_s},
        "podGC": {"strategy": "OnWorkflowSuccess"},
        "templates": templates,
    }
    if o.service_account:
        spec["serviceAccountName"] = o.service_account
    files["workflow.yaml"] = {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": meta,
        "spec": {k: v for k, v in spec.items() if v is not None},
    }
    return files


def _quantize_task(entry: dict[str, Any], cm: ClusterMatrix, local: dict[str, str]) -> str | None:
    """The DAG task that quantizes a build's checkpoint (on its own GPU's or another's nodes), if one does."""
    key = entry.get("quantized_key")
    if key in local:
        return local[key]
    for w in cm.by_gpu.values():
        for q in w.quantize:
            if q["quantized_key"] == key:
                return core.dns_label(f"q-{q['id']}", limit=63, prefix="t-")
    return None


def _tag_template(cm: ClusterMatrix, o: JobOptions, tag: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """One CPU step: every build index file's engines tagged ``<tag>-<cell job id>``."""
    script = " && ".join(
        f"python3 -m toolchain.cli.main job tag --cells {CELLS_MOUNT}/{v['name']}/build.json --tag {tag}"
        for v in volumes
    )
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": o.image,
        "imagePullPolicy": core.image_pull_policy(o.image),
        "command": ["sh", "-c", script],
        "env": [
            {"name": "TOOLCHAIN_REGISTRY", "value": o.registry},
            {"name": "TOOLCHAIN_CACHE", "value": f"{WORK_ROOT}/cache"},
            {"name": "HOME", "value": f"{WORK_ROOT}/home"},
        ],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": core.container_security(),
        "volumeMounts": [
            *({"name": v["name"], "mountPath": f"{CELLS_MOUNT}/{v['name']}", "readOnly": True} for v in volumes),
            {"name": "work", "mountPath": WORK_ROOT},
        ],
    }
    if o.registry_secret:
        container["envFrom"] = core.secret_env(o.registry_secret)
    return {
        "name": "tag-set",
        "volumes": [{"name": "work", "emptyDir": {}}],
        "retryStrategy": {"limit": str(o.retries)},
        "container": container,
    }
