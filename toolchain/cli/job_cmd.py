"""`toolchain job build|quantize|tag`: what one pod of a build farm Job or Argo task runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import Device, JsonOpt, RegistryOpt

app = typer.Typer(
    help="One pod of `toolchain matrix --format kubernetes|argo`: the work of its index.", no_args_is_help=True
)

CellsOpt = Annotated[Path, typer.Option("--cells", help="The index file (build.json, quantize.json) the matrix wrote")]
IndexOpt = Annotated[
    int | None, typer.Option("--index", help="Entry to do (default: $JOB_COMPLETION_INDEX, set by Kubernetes)", min=0)
]


def _render(result: dict[str, object], json_out: bool) -> None:
    from toolchain.cli.render import out, print_json

    if json_out:
        print_json(result)
    else:
        out.print(
            f"{result.get('status', 'done'):9} index {result.get('index')} of {result.get('of')}  {result.get('id')}",
            markup=False,
            highlight=False,
        )


@app.command("build", short_help="Build this pod's cell and push it (skip it when stored).")
def build(
    cells: CellsOpt,
    index: IndexOpt = None,
    registry: RegistryOpt = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds before a build is abandoned")] = None,
    wait_quantized: Annotated[
        float, typer.Option("--wait-quantized", help="Seconds to wait for the quantized checkpoint", min=0)
    ] = 0.0,
    json_out: JsonOpt = False,
) -> None:
    """Build the cell of this pod's index and push it to the registry (skip it when it is there).

    Examples:
      JOB_COMPLETION_INDEX=3 toolchain job build --cells /etc/toolchain/cells/build.json --registry s3://b/p
    """
    from toolchain.cli.render import Stages
    from toolchain.pipeline.cell_job import run_build

    r = run_build(
        cells, index=index, registry=registry, timeout=timeout, wait_s=wait_quantized, progress=Stages(every=30.0)
    )
    _render(r, json_out)


@app.command("quantize", short_help="Quantize this pod's group into the registry (skip if stored).")
def quantize(
    cells: CellsOpt,
    index: IndexOpt = None,
    registry: RegistryOpt = None,
    device: Annotated[Device, typer.Option("--device", help="Where ModelOpt calibrates")] = Device.cuda,
    json_out: JsonOpt = False,
) -> None:
    """Quantize the group of this pod's index into the registry (skip it when it is there).

    Examples:
      JOB_COMPLETION_INDEX=0 toolchain job quantize --cells /etc/toolchain/cells/quantize.json --registry s3://b/p
    """
    from toolchain.cli.render import Stages
    from toolchain.pipeline.cell_job import run_quantize_index

    r = run_quantize_index(cells, index=index, registry=registry, device=device.value, progress=Stages())
    _render(r, json_out)


@app.command("tag", short_help="Tag every engine of a build index once all are stored.")
def tag(
    cells: CellsOpt,
    name: Annotated[str, typer.Option("--tag", help="Tag prefix: each engine is tagged <tag>-<cell job id>")],
    registry: RegistryOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Tag every engine of a build index file, once all of them are in the registry.

    Examples:
      toolchain job tag --cells /etc/toolchain/cells/build.json --tag release-2026-12 --registry s3://b/p
    """
    from toolchain.cli.render import err, print_json
    from toolchain.pipeline.cell_job import tag_set

    r = tag_set(cells, name, registry=registry)
    if json_out:
        print_json(r)
    else:
        for t in r["tags"]:
            err.print(t, markup=False, highlight=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="job")
