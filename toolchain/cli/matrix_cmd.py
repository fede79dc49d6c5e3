"""`toolchain matrix`: CI job matrix over engine specs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import MatrixFormat, RegistryOpt, SpecsArg


def matrix(
    specs: SpecsArg,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="What to print")] = MatrixFormat.json,
    registry: RegistryOpt = None,
    runner_map: Annotated[Path | None, typer.Option("--runner-map", help="YAML: GPU name -> runner label")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Do not ask the registry what is cached")] = False,
    gitlab_max_jobs: Annotated[
        int,
        typer.Option(
            "--gitlab-max-jobs", min=1, help="Jobs GitLab allows in one pipeline (GitLab.com Free 500, Premium 1500)"
        ),
    ] = 500,
) -> None:
    """Jobs per cell (runner label, engine key, cached or not) and per quantization group.

    Examples:
      toolchain matrix engine_specs/*.yaml --format github --registry s3://engines/prod
      toolchain matrix engine_specs/*.yaml --format gitlab > child-pipeline.yml
    """
    from toolchain.cli.render import err, print_json
    from toolchain.errors import UserInputError
    from toolchain.pipeline.matrix import build_matrix, github, gitlab, gitlab_yaml, load_runner_map
    from toolchain.registry import open_registry

    if registry is not None and not registry.strip():
        raise UserInputError(
            "--registry is empty (is TOOLCHAIN_REGISTRY set in this CI job?)",
            "set it to the shared registry, or pass --offline to list every cell as not cached",
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
        f"{len(m['build'])} cells ({cached} already in the registry, no job for them), "
        f"{len(m['quantize'])} quantize groups"
    )


def register(app: typer.Typer) -> None:
    app.command()(matrix)
