"""`toolchain matrix --format kubernetes|argo [--check]`: one call from the CLI to the written manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.errors import UserInputError
from toolchain.outdir import check_output, write_output
from toolchain.pipeline import argo
from toolchain.pipeline.kube_jobs import (
    DEFAULT_BUILD_TIMEOUT_S,
    JobOptions,
    check_report,
    cluster_matrix,
    kubernetes_jobs,
    load_node_map,
    parse_model_volume,
    require_pod_visible,
    write_objects,
)
from toolchain.registry import open_registry


def cluster_cmd(
    specs: list[Path],
    *,
    fmt: str,
    out: Path | None,
    image: str | None,
    registry: str | None,
    offline: bool = False,
    node_map: Path | None = None,
    registry_secret: str | None = None,
    queue: str | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    check: bool = False,
    force: bool = False,
    model_volume: str | None = None,
) -> dict[str, Any]:
    """The cluster's share of the matrix: with ``check``, only what the registry holds; else the manifests
    written under ``out`` for what it does not."""
    if check and offline:
        raise UserInputError("--check asks the registry; --offline forbids it", "drop one of them")
    volume = parse_model_volume(model_volume)
    if not check:
        if out is None:
            raise UserInputError(f"--format {fmt} writes files", "add --out DIR (or --check to only report)")
        out = check_output(out, force=force)  # before the registry is asked
        if not image:
            raise UserInputError(
                f"--format {fmt} needs --image: the image the build pods run",
                "build one FROM the spec's container with the toolchain installed (docs/cluster-builds.md)",
            )
        if not registry and not check:
            raise UserInputError(
                "--registry is required: the pods push to it and the Jobs meet there",
                "give the shared registry (s3://..., hf://..., oci://...)",
            )
    nodes = load_node_map(node_map)
    if not check:  # before the registry is asked: a spec no pod can build is refused at once
        require_pod_visible(specs, volume)
    reg = None if offline else open_registry(registry)
    cm = cluster_matrix(specs, registry=reg, node_map=nodes, model_volume=volume, check_sources=not check)
    result: dict[str, Any] = {"format": fmt, "registry": reg.url if reg else registry, "report": check_report(cm)}
    if check:
        return result
    assert out is not None and image is not None and registry is not None
    o = JobOptions(
        image=image,
        registry=registry,
        registry_secret=registry_secret,
        queue=queue,
        namespace=namespace,
        build_timeout_s=int(timeout) if timeout else DEFAULT_BUILD_TIMEOUT_S,
        model_volume=volume,
    )
    objs = kubernetes_jobs(cm, o) if fmt == "kubernetes" else argo.workflow(cm, o)

    def fill(d: Path) -> dict[str, Path]:
        return dict(zip(objs, write_objects(objs, d), strict=True))

    written = list(write_output(out, fill, command=f"matrix --format {fmt}", force=force).values())
    result["written"] = [str(p) for p in written]
    if written:
        ns = f" -n {namespace}" if namespace else ""
        if fmt == "kubernetes":
            result["apply"] = f"kubectl apply{ns} -R -f {out}"
        else:
            cms = " ".join(f"-f {p}" for p in written if p.name != "workflow.yaml")
            result["apply"] = f"kubectl apply{ns} {cms} && argo submit{ns} {out / 'workflow.yaml'}"
    return result
