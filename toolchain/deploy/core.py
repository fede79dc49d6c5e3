"""What every Kubernetes object the toolchain writes shares: names, label scheme and restricted pod security.

`toolchain deploy` (serving manifests) and `toolchain matrix --format kubernetes|argo` (build Jobs, an Argo
Workflow) both use it, so a build pod and a serving pod of the same cell carry the same labels and run under
the same security context.

- **Names** are DNS-1035 labels (lower-case alphanumerics and '-', starting with a letter, at most 63
  characters): what a Service, a Job (whose name becomes its pods' ``job-name`` label) and most other objects
  accept. A name that would be too long keeps a readable prefix and ends in 8 hex digits of its sha256, so two
  long names never collide by truncation.
- **Labels** use the recommended ``app.kubernetes.io/*`` keys (kubernetes.io "Recommended Labels") with
  ``part-of: toolchain``, and ``toolchain/*`` keys for the engine key (its first 16 hex digits: a label value
  holds at most 63 characters) and the GPU.
- **Resources**: every container requests CPU and memory and is limited in memory (never in CPU: a CFS quota
  throttles a decode loop in bursts). A server's host memory follows one rule (:func:`server_memory`) for the
  Triton deployment and the Dynamo workers alike; a helper container (a frontend, a pull step) gets
  :data:`HELPER_RESOURCES`.
- **Pod security** meets the Pod Security Standards' ``restricted`` profile (kubernetes.io "Pod Security
  Standards"): non-root (the ``triton-server`` user, uid/gid 1000, that NGC's Triton images create:
  triton-inference-server/server ``build.py``), no privilege escalation, every capability dropped, the
  runtime's default seccomp profile.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

SERVER_UID = 1000  # triton-server in NGC's Triton images (triton-inference-server/server build.py)
PART_OF = "toolchain"
MAX_LABEL = 63  # DNS-1123/1035 label and label-value limit
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by GPU Feature Discovery
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def dns_label(raw: str, *, limit: int = 52, prefix: str = "tc-") -> str:
    """``raw`` as a DNS-1035 label of at most ``limit`` characters (the default leaves room for suffixes such
    as a Job's ``-<index>-<random>`` pod names), stable for the same input."""
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if not name[:1].isalpha():
        name = prefix + name
    if len(name) > limit:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = name[: limit - 9].rstrip("-") + "-" + digest
    return name


def label_value(raw: str) -> str:
    """A valid label value (at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at both ends)."""
    v = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._")
    if len(v) > MAX_LABEL:
        v = v[: MAX_LABEL - 9].rstrip("-._") + "-" + hashlib.sha256(raw.encode()).hexdigest()[:8]
    return v


def labels(app: str, component: str, *, engine_key: str | None = None, gpu: str | None = None) -> dict[str, str]:
    """The label set of every object of one workload."""
    out = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
    }
    if engine_key:
        out["toolchain/engine-key"] = engine_key[:16]
    if gpu:
        out["toolchain/gpu"] = label_value(gpu.lower())
    return out


GIB = 2**30
SHM_PER_RANK = 1 * GIB  # /dev/shm per rank (NCCL, the Python backend)
SHM_BASE = 1 * GIB
# a container that runs no model: the OpenAI frontend, the registry pull, the bundle check
HELPER_RESOURCES: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}


def server_memory(per_rank_bytes: int, ranks: int) -> tuple[int, int]:
    """(request, limit) of a server pod's host memory, whole GiB: /dev/shm of its ``ranks``, plus the page cache
    of one rank's weights being loaded (at most 32 GiB) and 8 GiB for the server; the limit holds every rank's
    weights and 16 GiB."""
    shm = SHM_PER_RANK * ranks + SHM_BASE
    request = _round_gib(shm + min(per_rank_bytes, 32 * GIB) + 8 * GIB)
    return request, _round_gib(shm + ranks * per_rank_bytes + 16 * GIB)


def server_resources(*, gpus: int, per_rank_bytes: int) -> dict[str, Any]:
    """A server container's requests and limits: 4 CPUs per GPU (at least 4), :func:`server_memory`, the GPUs."""
    request, limit = server_memory(per_rank_bytes, gpus)
    return {
        "requests": {"cpu": str(max(4, 4 * gpus)), "memory": quantity(request), GPU_RESOURCE: str(gpus)},
        "limits": {GPU_RESOURCE: str(gpus), "memory": quantity(limit)},
    }


def quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity: whole GiB, else MiB rounded up."""
    return f"{n // GIB}Gi" if n % GIB == 0 else f"{-(-n // 2**20)}Mi"


def _round_gib(n: float) -> int:
    return int(-(-n // GIB) * GIB)


def container_security() -> dict[str, Any]:
    """A container's securityContext under the restricted profile."""
    return {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_security(*, fs_group: bool = True) -> dict[str, Any]:
    """A pod's securityContext under the restricted profile, as the image's non-root server user; with
    ``fs_group`` its volumes are writable by that user (without a recursive chown at every start)."""
    sec: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": SERVER_UID, "runAsGroup": SERVER_UID}
    if fs_group:
        sec["fsGroup"] = SERVER_UID
        sec["fsGroupChangePolicy"] = "OnRootMismatch"
    sec["seccompProfile"] = {"type": "RuntimeDefault"}
    return sec


def secret_env(secret: str | None) -> list[dict[str, Any]]:
    """``envFrom`` entries that read registry credentials from a Secret by reference (no value is written)."""
    return [{"secretRef": {"name": secret, "optional": False}}] if secret else []


def image_pull_policy(image: str) -> str:
    """A digest names one image for good; a tag may have moved since the node pulled it."""
    return "IfNotPresent" if "@" in image else "Always"
