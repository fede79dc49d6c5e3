"""Record Argo Workflows' ``Workflow`` CRD schema for the offline manifest tests (tests/deploy/crd_schemas).

Usage: python scripts/record_argo_workflow_schema.py CRD.yaml SOURCE OUT.json

CRD.yaml is ``manifests/base/crds/full/argoproj.io_workflows.yaml`` of an argoproj/argo-workflows release
(the "full" CRDs carry the schema; the default install's minimal ones do not). It is made strict the way
scripts/record_crd_schemas.py does (unknown fields rejected). Then, to keep 2 MB of copied definitions out of
the repository, three things are cut: every ``description``; ``status`` (the controller writes it, never a
manifest); and the embedded Kubernetes core types (a template's ``container``, ``script``, ``volumes``,
``tolerations``, ``affinity``, the Workflow's ``securityContext`` ...), each replaced by its JSON type and
``x-toolchain-core: <Kubernetes kind>``. The tests validate those parts against the pinned Kubernetes
version's own schema (kubernetes-validate) instead, assembled into the Pod the controller would create.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_crd_schemas import strict, write_record  # the same strictness as the other recorded CRDs

# property name -> the Kubernetes type it embeds (wherever it appears under spec)
CORE = {
    "container": "Container",
    "script": "Container",
    "initContainers": "Container[]",
    "sidecars": "Container[]",
    "containerSet": "ContainerSetTemplate (Containers)",
    "volumes": "Volume[]",
    "volumeClaimTemplates": "PersistentVolumeClaim[]",
    "tolerations": "Toleration[]",
    "affinity": "Affinity",
    "securityContext": "PodSecurityContext",
    "dnsConfig": "PodDNSConfig",
    "hostAliases": "HostAlias[]",
    "imagePullSecrets": "LocalObjectReference[]",
    "executorPlugins": "ExecutorPlugin[]",
    "templateDefaults": "Template",
}


def cut(node: Any, name: str = "") -> Any:
    if isinstance(node, list):
        return [cut(x) for x in node]
    if not isinstance(node, dict):
        return node
    if name in CORE and node.get("type") in ("object", "array"):
        return {"type": node["type"], "x-toolchain-core": CORE[name]}
    out = {k: cut(v) for k, v in node.items() if k not in ("description", "properties")}
    if "properties" in node:
        out["properties"] = {k: cut(v, k) for k, v in node["properties"].items()}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__ or "")
        return 2
    crd_path, source, out = argv
    crd = yaml.safe_load(Path(crd_path).read_text())
    (v,) = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    schema = strict(v["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    schema = cut(schema)
    for k in ("apiVersion", "kind", "metadata"):
        schema["properties"][k] = {"type": "object" if k == "metadata" else "string"}
    write_record(crd, v["name"], schema, source, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
