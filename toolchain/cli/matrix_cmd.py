"""`toolchain matrix`: CI job matrix over engine specs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import ForceOpt, JsonOpt, MatrixFormat, MatrixRegistryOpt, SpecsArg, timeout_opt


def matrix(
    specs: SpecsArg,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="What to print")] = MatrixFormat.json,
    registry: MatrixRegistryOpt = None,
    runner_map: Annotated[Path | None, typer.Option("--runner-map", help="YAML: GPU name -> runner label")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Do not ask the registry what is cached")] = False,
    gitlab_max_jobs: Annotated[
        int,
        typer.Option(
            "--gitlab-max-jobs", min=1, help="Jobs GitLab allows in one pipeline (GitLab.com Free 500, Premium 1500)"
        ),
    ] = 500,
    out: Annotated[Path | None, typer.Option("--out", help="Directory to write (kubernetes, argo): manifests")] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", help="Image the build pods run (kubernetes, argo): the spec's container + toolchain"),
    ] = None,
    node_map: Annotated[
        Path | None, typer.Option("--node-map", help="YAML: GPU name -> nodeSelector, tolerations, gpus (kubernetes)")
    ] = None,
    registry_secret: Annotated[
        str | None, typer.Option("--registry-secret", help="Secret with the registry credentials (kubernetes, argo)")
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Kueue LocalQueue the Jobs are queued in")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Namespace of the Jobs")] = None,
    model_volume: Annotated[
        str | None,
        typer.Option(
            "--model-volume",
            help="CLAIM:MOUNTPATH: PersistentVolumeClaim holding the specs' local checkpoints, mounted read-only at "
            "MOUNTPATH in the build pods; local sources must be under MOUNTPATH (kubernetes, argo)",
        ),
    ] = None,
    timeout: Annotated[float | None, timeout_opt("a build")] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Report which cells the registry holds; write nothing (kubernetes, argo)")
    ] = False,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Jobs per cell (runner label, engine key, cached or not) and per quantization group.

    Examples:
      toolchain matrix engine_specs/*.yaml --format github --registry s3://engines/prod
      toolchain matrix engine_specs/*.yaml --format gitlab > child-pipeline.yml
      toolchain matrix engine_specs/llama-*.yaml --format kubernetes --out jobs/ --registry s3://engines/prod \\
        --image registry.example.com/toolchain-build:1.1.0 --registry-secret engine-registry --queue gpu-builds
      toolchain matrix engine_specs/*.yaml --format kubernetes --check --registry s3://engines/prod
    """
    from toolchain.cli.render import err, plural, print_json
    from toolchain.errors import UserInputError
    from toolchain.pipeline.matrix import build_matrix, github, gitlab, gitlab_yaml, load_runner_map
    from toolchain.registry import open_registry

    if registry is not None and not registry.strip():
        raise UserInputError(
            "--registry is empty (is TOOLCHAIN_REGISTRY set in this CI job?)",
            "set it to the shared registry, or pass --offline to list every cell as not cached",
        )
    if fmt in (MatrixFormat.kubernetes, MatrixFormat.argo):
        from toolchain import settings
        from toolchain.pipeline.cluster import cluster_cmd

        result = cluster_cmd(
            specs,
            fmt=fmt.value,
            out=out,
            image=image,
            registry=registry or settings.registry_url(),  # as the help says; never the local cache's registry
            offline=offline,
            node_map=node_map,
            registry_secret=registry_secret,
            queue=queue,
            namespace=namespace,
            timeout=timeout,
            check=check,
            force=force,
            model_volume=model_volume,
        )
        _render_cluster(result, json_out)
        return
    if check or out is not None or image is not None or force or model_volume is not None:
        raise UserInputError(
            "--check, --out, --force, --image and --model-volume apply to --format kubernetes or argo",
            "add --format kubernetes",
        )
    reg = None if offline else open_registry(registry)
    m = build_matrix(specs, registry=reg, runners=load_runner_map(runner_map))
    if fmt is MatrixFormat.github:
        print_json(github(m))
    elif fmt is MatrixFormat.gitlab:
        typer.echo(gitlab_yaml(gitlab(m, max_jobs=gitlab_max_jobs)))
    else:
        print_json(m)
    cached = sum(b["cached"] for b in m["build"])
    err.print(
        f"{plural(len(m['build']), 'cell')} ({cached} already in the registry, no job for them), "
        f"{plural(len(m['quantize']), 'quantize group')}"
    )


def _render_cluster(result: dict[str, object], json_out: bool) -> None:
    from toolchain.cli.render import err, out, plural, print_json

    if json_out:
        print_json(result)
        return
    report = result["report"]
    assert isinstance(report, dict)
    for c in report["cells"]:
        out.print(f"{'built  ' if c['built'] else 'missing'} {c['id']}  key {c['engine_key']}", markup=False)
    for path in result.get("written", []):  # type: ignore[attr-defined]
        err.print(f"wrote {path}", markup=False, highlight=False)
    err.print(
        f"{plural(report['built'], 'cell')} in the registry, {report['missing']} to build, "
        f"{len(report['quantize_pending'])} quantize groups to run"
        + (f"; apply with: {result['apply']}" if result.get("apply") else ""),
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command()(matrix)
