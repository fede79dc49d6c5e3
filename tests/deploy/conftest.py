"""Deploy fixtures: shipped specs and their plans, a tiny local spec, an offline validator for every manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import HUB_SPECS, write_tiny_spec
from tests.registry.conftest import moto_server, s3_env  # noqa: F401  (the moto S3 fixtures, shared)

HERE = Path(__file__).resolve().parent
CRD_SCHEMAS = HERE / "crd_schemas"
KUBERNETES = "1.34.0"  # the version the manifests are pinned to (toolchain.deploy.manifests.PINNED)
SHIPPED = HUB_SPECS  # the tiny model is tiny_spec_file: a fresh clone has no ../.work/tiny-llama


@pytest.fixture(scope="session")
def tiny_spec_file(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_spec(tmp_path_factory.mktemp("spec") / "tiny.yaml", tiny_checkpoint)


def _crd_validators() -> dict[tuple[str, str], Any]:
    import jsonschema

    out = {}
    for f in CRD_SCHEMAS.glob("*.json"):
        rec = json.loads(f.read_text())
        out[(f"{rec['group']}/{rec['version']}", rec["kind"])] = jsonschema.Draft7Validator(rec["schema"])
    return out


def _pod_templates(node: Any, schema: dict[str, Any], path: str = "") -> list[tuple[str, Any]]:
    """Values in ``node`` that the recorded CRD schema marks as embedded pod templates."""
    found: list[tuple[str, Any]] = []
    if schema.get("x-toolchain-pod-template"):
        return [(path, node)]
    if isinstance(node, dict):
        props = schema.get("properties", {})
        for k, v in node.items():
            if k in props:
                found += _pod_templates(v, props[k], f"{path}.{k}")
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):  # DynamoGraphDeployment components[]
        for i, v in enumerate(node):
            found += _pod_templates(v, schema["items"], f"{path}[{i}]")
    return found


@pytest.fixture(scope="session")
def validate_manifest() -> Callable[[dict[str, Any]], None]:
    """Validate one resource offline: core kinds against the Kubernetes OpenAPI schema of the pinned version
    (kubernetes-validate, strict: unknown fields fail), CRDs against the recorded upstream CRD schemas."""
    import kubernetes_validate

    crds = _crd_validators()

    def check(res: dict[str, Any]) -> None:
        key = (res["apiVersion"], res["kind"])
        if key in crds:
            crds[key].validate(res)
            rec_schema = crds[key].schema
            for _path, tmpl in _pod_templates(res, rec_schema):
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": tmpl},
                    KUBERNETES,
                    strict=True,
                )
            return
        kubernetes_validate.validate(res, KUBERNETES, strict=True)

    return check


def render_kustomization(k8s_dir: Path) -> list[dict[str, Any]]:
    """A tiny kustomize: every listed resource must exist and parse as one object; namespace and images applied."""
    k = yaml.safe_load((k8s_dir / "kustomization.yaml").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    assert set(k) <= {"apiVersion", "kind", "resources", "images", "namespace"}, sorted(k)
    out = []
    for name in k["resources"]:
        path = k8s_dir / name
        assert path.is_file(), f"kustomization lists {name}, which does not exist"
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert len(docs) == 1, f"{name} holds {len(docs)} documents"
        res = docs[0]
        if "namespace" in k:
            res["metadata"]["namespace"] = k["namespace"]
        for img in k.get("images", []):
            _set_image(res, img)
        out.append(res)
    listed = {p.name for p in k8s_dir.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == set(k["resources"]), "every manifest in the directory is listed"
    return out


def _set_image(node: Any, img: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, v in node.items():
            if key == "image" and isinstance(v, str) and v.split("@")[0].rsplit(":", 1)[0] == img["name"]:
                node[key] = img.get("newName", img["name"]) + (
                    f"@{img['digest']}" if "digest" in img else f":{img['newTag']}"
                )
            else:
                _set_image(v, img)
    elif isinstance(node, list):
        for x in node:
            _set_image(x, img)


def check_grafana_import(board: dict[str, Any]) -> None:
    """What Grafana's import needs of a dashboard (dashboard JSON model, docs/sources/dashboards/build-dashboards/
    view-dashboard-json-model): a title, a schemaVersion, panels with id/type/title/gridPos and Prometheus targets with
    refId and expr, the datasource as a template variable so the import asks for it; ids unique and panels inside the
    24-column grid. Every dashboard the toolchain writes (Triton's, Dynamo's) is held to it."""
    json.dumps(board)  # JSON-serialisable
    assert board["title"] and isinstance(board["schemaVersion"], int) and board["uid"]
    assert len(board["uid"]) <= 40  # Grafana's uid limit
    (var,) = board["templating"]["list"]
    assert var["type"] == "datasource" and var["query"] == "prometheus" and var["name"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert {"id", "type", "title", "gridPos", "targets", "datasource"} <= set(p), p["title"]
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and g["x"] + g["w"] <= 24
        assert p["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"] for t in p["targets"])
        for step in p["fieldConfig"]["defaults"]["thresholds"]["steps"]:
            assert set(step) == {"color", "value"}
        assert p["fieldConfig"]["defaults"]["thresholds"]["steps"][0]["value"] is None  # Grafana's base step
