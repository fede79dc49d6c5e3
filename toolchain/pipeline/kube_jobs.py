"""`toolchain matrix --format kubernetes`: the engine matrix as Kubernetes Indexed Jobs, the registry as the
rendezvous (docs/cluster-builds.md).

Per GPU type, in ``DIR/<gpu>/``:

- ``cells.yaml``: a ConfigMap holding the index → work mapping (``build.json``, ``quantize.json``: entry *i* is
  what completion index *i* does) and the spec files themselves, so a pod needs nothing but the image and the
  registry;
- ``quantize-job.yaml``: an Indexed Job with one completion per quantize group not in the registry;
- ``build-job.yaml``: an Indexed Job with one completion per cell whose engine is not in the registry.

Kubernetes sets ``JOB_COMPLETION_INDEX`` in each pod of an Indexed Job (kubernetes.io "Jobs", "Completion
mode"); `toolchain job build|quantize` reads it and does exactly that entry. A build pod whose quantized
checkpoint is not yet in the registry waits for it (bounded, a line of progress per poll), so both Jobs can be
applied at once. Each pod asks for TP × PP GPUs on a node of its GPU product (the ``nvidia.com/gpu.product``
label GPU Feature Discovery sets); ``backoffLimitPerIndex`` retries an index alone, and the
``podFailurePolicy`` ignores node disruptions (``DisruptionTarget``: preemption, eviction, a drained node)
and fails an index at once on the toolchain's deterministic exit codes (2 user error, 3 missing package, 4 no
GPU/TensorRT-LLM in the image), while exit 75 (EX_TEMPFAIL: the registry or the Hub unreachable, timed out, or
answering 429/5xx) is retried, counted against ``backoffLimitPerIndex``. Job names carry a digest of the work
they hold, so a re-run of the matrix after some cells are built writes a new, smaller Job instead of colliding
with the finished one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolchain import redact, yamlout
from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.keys import build_job_id, quantize_job_id
from toolchain.artifacts.recipe import is_unquantized
from toolchain.deploy import core
from toolchain.errors import EX_TEMPFAIL, CompatibilityError, UserInputError
from toolchain.hardware.catalog import GPU
from toolchain.pipeline.matrix import job_container
from toolchain.specs.loader import load_spec, parse_spec_text, safe_yaml
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import require_compatible

CELLS_MOUNT = "/etc/toolchain/cells"  # where the ConfigMap is mounted in every pod
WORK_ROOT = "/work"  # the pod's scratch volume: the toolchain cache and a writable home
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_RETRIES = 2  # backoffLimitPerIndex
DEFAULT_BUILD_TIMEOUT_S = 4 * 3600  # one cell's build
DEFAULT_QUANTIZE_TIMEOUT_S = 4 * 3600  # one quantize group; also how long a build pod waits for its checkpoint
DEFAULT_TTL_S = 7 * 24 * 3600  # finished Jobs (and their pods' logs) kept a week
FAIL_FAST_EXIT_CODES = [2, 3, 4]  # UserInputError, MissingDependencyError, NeedsGPUError (toolchain.errors)
RETRY_EXIT_CODES = [EX_TEMPFAIL]  # TransientError: the registry or the Hub unreachable, 429/5xx — try again
MAX_CONFIGMAP_BYTES = 1 << 20  # Kubernetes: a ConfigMap's data is at most 1 MiB
CONTAINER = "job"
MODELS_VOLUME = "models"  # the --model-volume PersistentVolumeClaim in every pod
_CLAIM_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a PVC name: a DNS-1123 subdomain
_RESERVED_MOUNTS = (CELLS_MOUNT, WORK_ROOT, "/dev/shm")


@dataclass(frozen=True)
class ModelVolume:
    """``--model-volume CLAIM:MOUNTPATH``: a PersistentVolumeClaim holding the specs' local checkpoints, mounted
    read-only at MOUNTPATH in every build pod. A local source must be under MOUNTPATH as resolved here: the pods
    see it at the same path (the volume is mounted at MOUNTPATH here too, or this is a copy of it)."""

    claim: str
    mount_path: str

    def volume(self) -> dict[str, Any]:
        return {"name": MODELS_VOLUME, "persistentVolumeClaim": {"claimName": self.claim, "readOnly": True}}

    def mount(self) -> dict[str, Any]:
        return {"name": MODELS_VOLUME, "mountPath": self.mount_path, "readOnly": True}

    def holds(self, path: Path) -> bool:
        return path.is_relative_to(self.mount_path)


def parse_model_volume(value: str | None) -> ModelVolume | None:
    """``CLAIM:MOUNTPATH`` as given to ``--model-volume``; None without it."""
    if value is None:
        return None
    claim, sep, mount = value.partition(":")
    hint = "give --model-volume CLAIM:MOUNTPATH, e.g. --model-volume models:/models (docs/matrix.md)"
    if not sep or not _CLAIM_NAME.fullmatch(claim):
        raise UserInputError(f"--model-volume {value!r} does not start with a PersistentVolumeClaim name", hint)
    if not mount.startswith("/") or os.path.normpath(mount) != mount or mount == "/":
        raise UserInputError(f"--model-volume {value!r}: {mount!r} is not an absolute, normalized mount path", hint)
    for reserved in _RESERVED_MOUNTS:
        if Path(reserved).is_relative_to(mount) or (Path(mount).is_relative_to(reserved) and reserved != WORK_ROOT):
            raise UserInputError(
                f"--model-volume {value!r}: {mount} overlaps the pods' own mount {reserved}",
                "mount the models elsewhere, e.g. --model-volume CLAIM:/models",
            )
    return ModelVolume(claim, mount)


def local_sources(spec: EngineSpec) -> list[tuple[str, str, Path]]:
    """(field, value as written, path resolved against the spec file) of every local checkpoint a build reads:
    the model, a draft model, Medusa/EAGLE heads, LoRA adapters."""
    named = [("model.source", spec.model.source)]
    sd = spec.speculative
    if sd is not None and sd.draft is not None:
        named.append(("speculative.draft.source", sd.draft.source))
    if sd is not None and sd.heads is not None:
        named.append(("speculative.heads.source", sd.heads.source))
    if spec.lora is not None:
        named += [(f"lora.adapters[{i}]", a) for i, a in enumerate(spec.lora.adapters)]
    out = []
    for field_name, raw in named:
        if raw.startswith("hf://"):
            continue
        p = Path(raw).expanduser()
        out.append((field_name, raw, p if p.is_absolute() else Path(os.path.abspath(spec.base_dir / p))))
    return out


def _pod_visible(path: Path, spec: EngineSpec, text: str, volume: ModelVolume | None) -> str:
    """The spec text the pods get: refused when a local checkpoint is where no pod sees it; relative local
    sources rewritten to the absolute paths they resolve to here (the spec file moves into the ConfigMap)."""
    local = local_sources(spec)
    if not local:
        return text
    field_name, raw, where = next(((f, r, w) for f, r, w in local if volume is None or not volume.holds(w)), local[0])
    if volume is None:
        raise UserInputError(
            f"{path}: {field_name} {raw!r} is a local directory, which the build pods cannot see",
            "put the checkpoint on a PersistentVolumeClaim and pass --model-volume CLAIM:MOUNTPATH, or use an "
            "hf://org/name@revision source (docs/matrix.md)",
        )
    if not volume.holds(where):
        raise UserInputError(
            f"{path}: {field_name} {where} is not under the --model-volume mount path {volume.mount_path}",
            f"put the checkpoint under {volume.mount_path} (the pods mount {volume.claim} there) and point "
            f"{field_name} at it",
        )
    if all(Path(raw).expanduser().is_absolute() for _, raw, _ in local):
        return text
    data = safe_yaml(text)
    resolved = {raw: str(w) for _, raw, w in local}
    data["model"]["source"] = resolved.get(data["model"]["source"], data["model"]["source"])
    sd = data.get("speculative") or {}
    for block in ("draft", "heads"):
        if isinstance(sd.get(block), dict) and sd[block].get("source") in resolved:
            sd[block]["source"] = resolved[sd[block]["source"]]
    if isinstance(data.get("lora"), dict):
        data["lora"]["adapters"] = [resolved.get(a, a) for a in data["lora"].get("adapters", [])]
    return yamlout.dump(data, sort_keys=False)


@dataclass(frozen=True)
class NodePool:
    """Where one GPU type's pods run: the node labels to select, the taints to tolerate, GPUs per node."""

    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    gpus: int = DEFAULT_GPUS_PER_NODE


def default_pool(gpu: GPU) -> NodePool:
    return NodePool({core.GPU_PRODUCT_LABEL: gpu.gfd_product}, [dict(core.GPU_TOLERATION)])


def load_node_map(path: Path | None) -> dict[str, NodePool] | None:
    """``--node-map`` YAML: GPU catalog name → {nodeSelector, tolerations, gpus}. Without it, every GPU gets its
    GPU Feature Discovery product label, the ``nvidia.com/gpu`` toleration and 8 GPUs a node."""
    if path is None:
        return None
    try:
        data = safe_yaml(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise UserInputError(f"cannot read node map {path}: {e.strerror or e}", "give a YAML mapping") from e
    except (yaml.YAMLError, ValueError, TypeError) as e:
        raise UserInputError(f"node map {path} is not plain YAML: {str(e).splitlines()[0][:120]}") from e
    hint = "map each GPU name to {nodeSelector: {label: value}, tolerations: [...], gpus: N} (docs/cluster-builds.md)"
    if not isinstance(data, dict):
        raise UserInputError(f"{path} must map GPU catalog names to node pools", hint)
    pools = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or set(entry) - {"nodeSelector", "tolerations", "gpus"}:
            raise UserInputError(f"{path}: {name} must hold only nodeSelector, tolerations and gpus", hint)
        sel = entry.get("nodeSelector", {})
        tol = entry.get("tolerations", [])
        gpus = entry.get("gpus", DEFAULT_GPUS_PER_NODE)
        if not isinstance(sel, dict) or not sel or not all(isinstance(v, str) for v in sel.values()):
            raise UserInputError(f"{path}: {name} has no nodeSelector of string labels", hint)
        if not isinstance(tol, list) or not all(isinstance(t, dict) for t in tol):
            raise UserInputError(f"{path}: {name}'s tolerations must be a list of tolerations", hint)
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise UserInputError(f"{path}: {name}'s gpus must be a positive integer", hint)
        pools[str(name)] = NodePool({str(k): v for k, v in sel.items()}, tol, gpus)
    return pools


@dataclass
class GpuWork:
    """One GPU type's share of the matrix: the pending quantize groups and build cells, and what is held."""

    gpu: str
    pool: NodePool
    gpus: int  # per pod: TP x PP of every cell here (one Job per GPU type and count, so none asks for more)
    quantize: list[dict[str, Any]] = field(default_factory=list)
    build: list[dict[str, Any]] = field(default_factory=list)
    cached: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ClusterMatrix:
    by_gpu: dict[str, GpuWork]  # "<GPU>-<n>gpu" → its work
    specs: dict[str, str]  # ConfigMap key → spec file text
    containers: set[str]

    def cells(self) -> list[dict[str, Any]]:
        return [c for w in self.by_gpu.values() for c in (*w.build, *w.cached)]


def require_pod_visible(specs: list[Path], volume: ModelVolume | None) -> None:
    """Refuse the first spec with a local checkpoint no build pod can see (nothing else is computed)."""
    for path in specs:
        _pod_visible(path, load_spec(path), path.read_text(encoding="utf-8"), volume)


def cluster_matrix(
    specs: list[Path],
    *,
    registry: Any = None,
    node_map: dict[str, NodePool] | None = None,
    model_volume: ModelVolume | None = None,
    check_sources: bool = True,
) -> ClusterMatrix:
    """Every cell of the specs, grouped by GPU type; with ``registry``, which engines and quantized checkpoints
    it holds (one listing), so only the rest gets work. With ``check_sources`` (the manifests are written), a
    spec whose local checkpoint no pod can see is refused (:func:`_pod_visible`); the keys are those of the
    spec text the pods get."""
    held = set(registry.keys()) if registry is not None else set()
    by_gpu: dict[str, GpuWork] = {}
    spec_keys: dict[str, str] = {}
    containers: set[str] = set()
    groups: dict[str, tuple[str, dict[str, Any]]] = {}  # quantize id → (gpu it runs on, entry)
    for n, path in enumerate(specs):
        spec = load_spec(path)
        try:
            require_compatible(spec)
        except CompatibilityError as e:
            raise CompatibilityError(f"{path}: {e.message}", e.hint) from e
        key = f"spec-{n}-{core.dns_label(path.stem, limit=40, prefix='s-')}.yaml"
        text = path.read_text(encoding="utf-8")
        if check_sources:
            pod_text = _pod_visible(path, spec, text, model_volume)
            if pod_text != text:  # as the pods load it: the keys follow the text they get
                spec = parse_spec_text(pod_text, str(path)).with_base_dir(spec.base_dir)
                text = pod_text
        spec_keys[key] = text
        containers.add(job_container(spec, path))
        for art in for_cells(spec):
            cell = art.cell
            pool = _pool(cell.gpu, node_map)
            if cell.world_size > pool.gpus:
                raise UserInputError(
                    f"{path}: cell {cell.id} needs {cell.world_size} GPUs (TP {cell.tp} x PP {cell.pp}); a "
                    f"{cell.gpu.name} node has {pool.gpus}",
                    "build it on a larger node pool (gpus: in --node-map) or drop that tp/pp from the spec",
                )
            work = by_gpu.setdefault(
                f"{cell.gpu.name}-{cell.world_size}gpu", GpuWork(cell.gpu.name, pool, cell.world_size)
            )
            qkey = art.quantized_key
            qid = quantize_job_id(qkey)
            quantized = is_unquantized(spec) or qkey in held
            entry = {
                "id": build_job_id(spec, cell),
                "spec": key,
                "spec_path": str(path),
                "cell": cell.id,
                "gpu": cell.gpu.name,
                "gpus": cell.world_size,
                "engine_key": art.engine_key,
                "quantized_key": None if is_unquantized(spec) else qkey,
                "cached": art.engine_key in held,
            }
            (work.cached if entry["cached"] else work.build).append(entry)
            if not entry["cached"] and not quantized and qid not in groups:
                groups[qid] = (
                    f"{cell.gpu.name}-{cell.world_size}gpu",
                    {
                        "id": qid,
                        "spec": key,
                        "spec_path": str(path),
                        "tp": cell.tp,
                        "pp": cell.pp,
                        "gpus": cell.world_size,
                        "quantized_key": qkey,
                    },
                )
    for where, q in groups.values():  # a group shared by several GPU types runs once, on the first one's nodes
        by_gpu[where].quantize.append(q)
    return ClusterMatrix(by_gpu, spec_keys, containers)


def _pool(gpu: GPU, node_map: dict[str, NodePool] | None) -> NodePool:
    if node_map is None:
        return default_pool(gpu)
    if gpu.name not in node_map:
        raise UserInputError(
            f"no node pool for GPU {gpu.name} in the --node-map",
            f"add {gpu.name}: {{nodeSelector: {{{core.GPU_PRODUCT_LABEL}: {gpu.gfd_product}}}}} to it",
        )
    return node_map[gpu.name]


@dataclass(frozen=True)
class JobOptions:
    """What every Job of one `toolchain matrix --format kubernetes|argo` run shares."""

    image: str
    registry: str
    registry_secret: str | None = None
    queue: str | None = None  # Kueue LocalQueue
    namespace: str | None = None
    retries: int = DEFAULT_RETRIES
    build_timeout_s: int = DEFAULT_BUILD_TIMEOUT_S
    quantize_timeout_s: int = DEFAULT_QUANTIZE_TIMEOUT_S
    parallelism: int | None = None  # pods at once per Job; default all
    ttl_s: int = DEFAULT_TTL_S
    service_account: str | None = None
    model_volume: ModelVolume | None = None


def job_command(kind: str, o: JobOptions) -> list[str]:
    """The container's command: `toolchain job KIND` over the mounted index file (the index from the env)."""
    cmd = ["python3", "-m", "toolchain.cli.main", "job", kind, "--cells", f"{CELLS_MOUNT}/{kind}.json"]
    if kind == "build":
        cmd += ["--timeout", str(o.build_timeout_s), "--wait-quantized", str(o.quantize_timeout_s)]
    else:
        cmd += ["--device", "cuda"]
    return cmd


def pod_template(
    o: JobOptions, pool: NodePool, *, gpus: int, cells_configmap: str, command: list[str], meta: dict[str, str]
) -> dict[str, Any]:
    """A build farm pod: restricted security, the GPUs, the node pool, the registry Secret, the index file."""
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": o.image,
        "imagePullPolicy": core.image_pull_policy(o.image),
        "command": command,
        "env": [
            {"name": "TOOLCHAIN_REGISTRY", "value": o.registry},
            {"name": "TOOLCHAIN_CACHE", "value": f"{WORK_ROOT}/cache"},
            {"name": "HOME", "value": f"{WORK_ROOT}/home"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},  # progress lines reach `kubectl logs` as they happen
        ],
        "resources": {
            "requests": {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi"},
            "limits": {core.GPU_RESOURCE: str(gpus), "memory": f"{64 * gpus}Gi"},
        },
        "securityContext": core.container_security(),
        "volumeMounts": [
            {"name": "cells", "mountPath": CELLS_MOUNT, "readOnly": True},
            {"name": "work", "mountPath": WORK_ROOT},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if o.model_volume is not None:
        container["volumeMounts"].append(o.model_volume.mount())
    env_from = core.secret_env(o.registry_secret)
    if env_from:
        container["envFrom"] = env_from
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a podFailurePolicy needs it; the Job, not the kubelet, retries
        "nodeSelector": dict(pool.node_selector),
        "tolerations": [dict(t) for t in pool.tolerations],
        "securityContext": core.pod_security(),
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            {"name": "cells", "configMap": {"name": cells_configmap}},
            {"name": "work", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            *([o.model_volume.volume()] if o.model_volume is not None else []),
        ],
    }
    if o.service_account:
        spec["serviceAccountName"] = o.service_account
    return {"metadata": {"labels": meta}, "spec": spec}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def _metadata(name: str, lab: dict[str, str], o: JobOptions) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "labels": dict(lab)}
    if o.namespace:
        m["namespace"] = o.namespace
    return m


def index_entries(kind: str, work: GpuWork) -> list[dict[str, Any]]:
    """What ``{kind}.json`` holds: entry i is completion index i's work."""
    keep = (
        ("id", "spec", "cell", "engine_key", "quantized_key", "gpus")
        if kind == "build"
        else ("id", "spec", "tp", "pp", "quantized_key", "gpus")
    )
    return [{k: e[k] for k in keep if e.get(k) is not None} for e in getattr(work, kind)]


def configmap(name: str, lab: dict[str, str], work: GpuWork, cm: ClusterMatrix, o: JobOptions) -> dict[str, Any]:
    used = {e["spec"] for e in (*work.build, *work.quantize)}
    data = {
        "build.json": json.dumps(index_entries("build", work), indent=1) + "\n",
        "quantize.json": json.dumps(index_entries("quantize", work), indent=1) + "\n",
        **{k: v for k, v in cm.specs.items() if k in used},
    }
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > MAX_CONFIGMAP_BYTES:
        raise UserInputError(
            f"the {work.gpu} cell list is {size:,} bytes; a ConfigMap holds at most {MAX_CONFIGMAP_BYTES:,}",
            "split the specs over several `toolchain matrix` runs",
        )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(name, lab, o), "data": data}


def indexed_job(
    kind: str, name: str, lab: dict[str, str], work: GpuWork, cells_cm: str, o: JobOptions
) -> dict[str, Any]:
    entries = getattr(work, kind)
    n = len(entries)
    gpus = work.gpus
    parallel = min(n, o.parallelism or n)
    timeout = o.build_timeout_s if kind == "build" else o.quantize_timeout_s
    waves = -(-n // parallel)
    # every index may run 1 + retries times, one wave of `parallelism` pods after another; a build pod may
    # first wait up to the quantize timeout for its checkpoint
    deadline = waves * (o.retries + 1) * timeout + (o.quantize_timeout_s if kind == "build" else 0)
    job_labels = dict(lab)
    if o.queue:
        job_labels["kueue.x-k8s.io/queue-name"] = o.queue  # Kueue admits the Job against that LocalQueue
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(name, job_labels, o),
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": parallel,
            "backoffLimitPerIndex": o.retries,
            "podFailurePolicy": {
                "rules": [
                    {  # the toolchain's deterministic failures: a retry would fail the same way
                        "action": "FailIndex",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": FAIL_FAST_EXIT_CODES,
                        },
                    },
                    {  # the registry or the Hub unreachable, 429/5xx (exit 75): a retry may succeed, so it is
                        # retried, counted against backoffLimitPerIndex (never FailIndex)
                        "action": "Count",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": RETRY_EXIT_CODES,
                        },
                    },
                    {  # preempted, evicted, its node drained: not the cell's fault, not counted
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": o.ttl_s,
            "template": pod_template(
                o, work.pool, gpus=gpus, cells_configmap=cells_cm, command=job_command(kind, o), meta=lab
            ),
        },
    }


def gpu_objects(where: str, work: GpuWork, cm: ClusterMatrix, o: JobOptions) -> dict[str, dict[str, Any]]:
    """File name → object for one GPU type and count (nothing when all its cells are held)."""
    if not work.build and not work.quantize:
        return {}
    tag = _digest([index_entries("build", work), index_entries("quantize", work), o.image, o.registry])
    base = core.dns_label(f"tc-{where}", limit=40)
    cells_name = f"{base}-cells-{tag}"
    out: dict[str, dict[str, Any]] = {
        "cells.yaml": configmap(cells_name, core.labels(base, "build-cells", gpu=work.gpu), work, cm, o)
    }
    for kind in ("quantize", "build"):
        if getattr(work, kind):
            lab = core.labels(base, f"engine-{kind}", gpu=work.gpu)
            out[f"{kind}-job.yaml"] = indexed_job(kind, f"{base}-{kind}-{tag}", lab, work, cells_name, o)
    return out


def kubernetes_jobs(cm: ClusterMatrix, o: JobOptions) -> dict[str, dict[str, Any]]:
    """Relative path → object, every GPU type's ConfigMap and Jobs."""
    _check_options(o)
    out = {}
    for where, work in sorted(cm.by_gpu.items()):
        for name, obj in gpu_objects(where, work, cm, o).items():
            out[f"{core.dns_label(where, limit=40)}/{name}"] = obj
    return out


def _check_options(o: JobOptions) -> None:
    if o.registry and redact.has_credentials(o.registry):
        raise UserInputError(
            f"--registry {redact.url(o.registry)!r} carries credentials, which would be written into the manifests "
            "in plain text",
            "drop the 'user:password@' part and give them in a Secret: --registry-secret NAME",
        )
    if not o.registry or ("://" not in o.registry and not o.registry.startswith("/")):
        raise UserInputError(
            f"--registry {o.registry!r} is not one the pods can reach",
            "give the shared registry (s3://..., hf://..., oci://...) the Jobs push to",
        )
    if ":" not in o.image.rsplit("/", 1)[-1] and "@" not in o.image:
        raise UserInputError(f"--image {o.image} has no tag or digest", "name a tag (not latest) or @sha256:...")


def write_objects(objs: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """Write each object as one YAML document under ``out`` (an existing directory is added to)."""
    written = []
    for rel, obj in objs.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(yamlout.dump(obj, sort_keys=False), encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written


def check_report(cm: ClusterMatrix) -> dict[str, Any]:
    """Which cells the registry holds, per GPU: what a re-applied Job set would still do."""
    cells = [
        {"id": c["id"], "spec": c["spec_path"], "cell": c["cell"], "engine_key": c["engine_key"], "built": c["cached"]}
        for c in cm.cells()
    ]
    quantize = [q["id"] for w in cm.by_gpu.values() for q in w.quantize]
    return {
        "cells": cells,
        "built": sum(c["built"] for c in cells),
        "missing": sum(not c["built"] for c in cells),
        "quantize_pending": quantize,
    }
