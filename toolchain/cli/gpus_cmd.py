"""`toolchain gpus`: the GPU catalog and what this machine has."""

from __future__ import annotations

import typer

from toolchain.cli.options import JsonOpt


def gpus(json_out: JsonOpt = False) -> None:
    """List catalog GPUs (names for matrix.gpu) and the GPUs NVML sees here.

    Examples: toolchain gpus --json
    """
    from dataclasses import asdict

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
    t = Table(title="GPU catalog")
    for col in ("name", "NVML name", "SM", "memory GB", "HBM TB/s", "BF16 TF", "FP8 TF", "FP4 TF", "weights"):
        t.add_column(col)
    for g in CATALOG.values():
        t.add_row(
            g.name,
            g.nvml_name,
            g.compute_capability,
            f"{g.memory_gb:g}",
            f"{g.hbm_tb_s:g}",
            f"{g.bf16_tflops:g}",
            f"{g.fp8_tflops or '-'}",
            f"{g.fp4_tflops or '-'}",
            ",".join(g.precisions),
        )
    out.print(t)
    for lg in local:
        err.print(f"local GPU {lg.index}: {lg.name} (SM {lg.compute_capability}, driver {lg.driver})")
    if not local:
        err.print(f"no local GPU: {reason}")


def register(app: typer.Typer) -> None:
    app.command()(gpus)
