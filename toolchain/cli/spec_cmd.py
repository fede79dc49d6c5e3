"""`toolchain spec validate|schema|expand`."""

from __future__ import annotations

from typing import Any

import typer

from toolchain.cli.options import JsonOpt, SpecArg, SpecsArg

app = typer.Typer(help="Validate engine specs, print their JSON Schema, expand their matrix.", no_args_is_help=True)


@app.command()
def validate(specs: SpecsArg, json_out: JsonOpt = False) -> None:
    """Parse every SPEC strictly and check its compatibility rules for every matrix cell.

    Examples: toolchain spec validate engine_specs/*.yaml
    """
    from toolchain.cli.render import err, print_json
    from toolchain.errors import ToolchainError
    from toolchain.specs.cuda_graphs import notes
    from toolchain.specs.gate import caveats
    from toolchain.specs.rules import validate_spec_file

    results: list[dict[str, Any]] = []
    failures: list[tuple[str, ToolchainError]] = []
    for path in specs:
        try:
            spec, cells = validate_spec_file(path)
            said = notes(spec, cells)  # what a knob means on this runtime, where it differs from the schema's wording
            warned = caveats(spec)  # the family table's "yes (caveat)"
            res = {"spec": str(path), "ok": True, "name": spec.name, "cells": len(cells), "notes": said}
            results.append({**res, "warnings": warned})
            if not json_out:
                err.print(f"[green]ok[/green] {path} ({spec.name}, {len(cells)} cells)")
                for line in warned:
                    err.print(f"  warning: {line}", highlight=False, markup=False)
                for line in said:
                    err.print(f"  note: {line}", highlight=False, markup=False)
        except ToolchainError as e:
            results.append({"spec": str(path), "ok": False, "error": e.message, "hint": e.hint, "exit": e.exit_code})
            failures.append((str(path), e))
    if json_out:
        print_json(results)
    if failures:
        if len(failures) == 1:
            raise failures[0][1]
        for _, earlier in failures[:-1]:
            err.print(f"Error: {earlier.message} — {earlier.hint}", markup=False, highlight=False)
        raise failures[-1][1]


@app.command()
def schema() -> None:
    """Print the JSON Schema of engine specs (for yaml-language-server / editor completion).

    Examples: toolchain spec schema > engine-spec.schema.json
    """
    from toolchain.cli.render import print_json
    from toolchain.specs.models import schema as spec_schema

    print_json(spec_schema())


@app.command()
def expand(spec: SpecArg, json_out: JsonOpt = False) -> None:
    """List every matrix cell of SPEC with its engine key and profile id.

    Examples: toolchain spec expand engine_specs/llama-3.1-8b-fp8.yaml --json
    """
    from toolchain.artifacts.cell import for_cells
    from toolchain.cli.render import print_json, print_table
    from toolchain.specs.gate import checked_spec

    s = checked_spec(spec)  # the rules `spec validate` applies, with its message (specs.gate)
    ids = for_cells(s)
    if json_out:
        print_json({"spec": s.name, "cells": [i.to_json() for i in ids]})
        return
    rows = [
        [
            i.cell.id,
            i.cell.gpu.name,
            str(i.cell.max_batch_size),
            str(i.cell.max_seq_len),
            str(i.cell.max_input_len),
            str(i.cell.tp),
            (i.engine_key or "pending")[:16],
            (i.profile_id or i.pending or "")[:16],
        ]
        for i in ids
    ]
    columns = ["cell", "gpu", "batch", "seq", "input", "tp", "engine key", "profile id"]
    print_table(f"{s.name}: {len(ids)} cells", columns, rows)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="spec")
