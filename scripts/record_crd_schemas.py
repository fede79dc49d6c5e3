"""Record the validation schema of a CustomResourceDefinition for the offline manifest tests.

Usage: python scripts/record_crd_schemas.py CRD.yaml SOURCE OUT.json

SOURCE names where the CRD came from (repository, tag, path). The schema written is the CRD's served
version's ``openAPIV3Schema`` made strict the way ``kubectl apply --validate=strict`` is: every object with
``properties`` and no ``x-kubernetes-preserve-unknown-fields`` rejects unknown fields. Embedded pod
templates (LeaderWorkerSet ``leaderTemplate``/``workerTemplate``) are cut out and marked
``x-toolchain-pod-template``; the tests validate them against the core PodTemplateSpec schema of the pinned
Kubernetes version instead of 1.3 MB of copied definitions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

POD_TEMPLATES = ("leaderTemplate", "workerTemplate")


def strict(node: Any, name: str = "") -> Any:
    if isinstance(node, list):
        return [strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    if name in POD_TEMPLATES and node.get("type") == "object":
        return {"type": "object", "x-toolchain-pod-template": True}
    out = {k: strict(v) for k, v in node.items() if k != "properties"}
    if "properties" in node:
        out["properties"] = {k: strict(v, k) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            out["additionalProperties"] = False
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__ or "")
        return 2
    crd_path, source, out = argv
    crd = yaml.safe_load(Path(crd_path).read_text())
    versions = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    v = versions[0]
    schema = strict(v["schema"]["openAPIV3Schema"])
    # apiVersion/kind/metadata are checked by the API server, not the CRD schema
    for k in ("apiVersion", "kind", "metadata"):
        schema.setdefault("properties", {}).setdefault(k, {"type": "object" if k == "metadata" else "string"})
    write_record(crd, v["name"], schema, source, out)
    return 0


def write_record(crd: dict[str, Any], version: str, schema: dict[str, Any], source: str, out: str) -> None:
    """The recorded schema file the tests read: where it came from, the CRD's group/version/kind, the schema."""
    record = {
        "source": source,
        "group": crd["spec"]["group"],
        "version": version,
        "kind": crd["spec"]["names"]["kind"],
        "schema": schema,
    }
    Path(out).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
