"""`toolchain gpus`: the GPU catalog and what this machine has."""

from __future__ import annotations

from typing import Annotated

import typer

from toolchain.cli.options import JsonOpt


def gpus(
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column (the NVML name and the weight formats too)")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """List catalog GPUs (names for matrix.gpu) and the GPUs NVML sees here.

    Examples:
      toolchain gpus
      toolchain gpus --wide
      toolchain gpus --json
    """
    from dataclasses import asdict

    from rich import box
    from rich.table import Table

    from toolchain.cli.render import err, out, print_json
    from toolchain.hardware.catalog import CATALOG
    from toolchain.hardware.detect import detect_gpus

    local, reason = detect_gpus()
    if json_out:
        print_json(
            {
                "catalog": [asdict(g) for g in CATALOG.values()],
                "local": [asdict(g) for g in local],
                "local_reason": reason,
            }
        )
        return
    # no vertical rules and one line per GPU: the names are what a spec's matrix.gpu takes, so never cut at 80
    t = Table(title="GPU catalog", box=box.SIMPLE_HEAVY, show_edge=False, pad_edge=False, collapse_padding=True)
    cols = ["name", "SM", "memory GB", "HBM TB/s", "BF16 TF", "FP8 TF", "FP4 TF"]
    for i, col in enumerate([*cols, *(["NVML name", "weights"] if wide else [])]):
        t.add_column(col, justify="left" if i == 0 or i >= len(cols) else "right", no_wrap=i < len(cols))
    for g in CATALOG.values():
        row = [
            g.name,
            g.compute_capability,
            f"{g.memory_gb:g}",
            f"{g.hbm_tb_s:g}",
            f"{g.bf16_tflops:g}",
            f"{g.fp8_tflops or '-'}",
            f"{g.fp4_tflops or '-'}",
        ]
        t.add_row(*row, *([g.nvml_name, ",".join(g.precisions)] if wide else []))
    out.print(t)
    if not wide:
        err.print("NVML names and the weight formats each GPU builds: toolchain gpus --wide")
    for lg in local:
        err.print(f"local GPU {lg.index}: {lg.name} (SM {lg.compute_capability}, driver {lg.driver})")
    if not local:
        err.print(f"no local GPU: {reason}")


def register(app: typer.Typer) -> None:
    app.command()(gpus)
