"""`toolchain up SPEC`: the whole pipeline on one cell."""

from __future__ import annotations

from typing import Annotated

import typer

from toolchain.cli.options import CellOpt, JsonOpt, RegistryOpt, SpecArg


def up(
    spec: SpecArg,
    cell: CellOpt = None,
    registry: RegistryOpt = None,
    requests: Annotated[int, typer.Option("--requests", help="Measured requests per load point")] = 8,
    json_out: JsonOpt = False,
) -> None:
    """Quantize, plan, build or fetch, emit, serve, benchmark and report one cell (default: the first).

    Examples: toolchain up engine_specs/tiny.yaml
    """

    from toolchain.cli.bench_cmd import print_table
    from toolchain.cli.render import Stages, err, print_json, print_wrapped
    from toolchain.pipeline.up import run_up
    from toolchain.specs.gate import checked_spec

    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    stages = Stages(quiet=False)
    try:
        res = run_up(s, cell_id=cell, registry=registry, requests=requests, progress=stages)
    finally:
        stages.close()
    if json_out:
        from dataclasses import asdict

        from toolchain.bench.run import without_records

        d = asdict(res)
        d["bench"] = without_records(res.bench) if res.bench is not None else None
        print_json(d)
        return
    if res.bench:
        print_table(res.bench, served_by=False)  # the summary below says what served
    # label: value lines, not a table: keys and paths are what a person copies, so they are wrapped at spaces
    # (print_wrapped: a path or key is never split, never cut to "…")
    keys = [("engine key", res.engine_key or "-"), ("profile id", res.profile_id or "-")]
    rows = [("served by", res.served_by), *((f"stage: {k}", v) for k, v in res.stages.items())]
    rows += list(res.artifacts.items())
    lines = [f"toolchain up {res.spec} / {res.cell}"]
    for block in (keys, rows):  # the keys aligned on their own: a 64-digit key then fits one 80-column line
        width = max(len(k) for k, _ in block)
        lines += [f"  {k.ljust(width)}  {v}" for k, v in block]
    print_wrapped("\n".join(lines))
    for f in res.findings:
        err.print(
            f"diagnose [{f['severity']}] {f['rule']}: {f['evidence']} -> {f['action']}",
            highlight=False,
            markup=False,
        )


def register(app: typer.Typer) -> None:
    app.command()(up)
