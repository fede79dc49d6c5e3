"""`toolchain spec validate|schema|expand`."""

from __future__ import annotations

from typing import Any

import typer

from toolchain.cli.options import JsonOpt, SpecArg, SpecsArg, WideOpt

app = typer.Typer(help="Validate engine specs, print their JSON Schema, expand their matrix.", no_args_is_help=True)


@app.command(short_help="Parse specs strictly; check every cell's compatibility rules.")
def validate(specs: SpecsArg, json_out: JsonOpt = False) -> None:
    """Parse every SPEC strictly and check its compatibility rules for every matrix cell.

    Examples: toolchain spec validate engine_specs/*.yaml
    """
    from toolchain.cli.render import err, plural, print_json
    from toolchain.errors import SpecError, ToolchainError
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
                err.print(f"[green]ok[/green] {path} ({spec.name}, {plural(len(cells), 'cell')})")
                for line in warned:
                    err.print(f"  warning: {line}", highlight=False, markup=False)
                for line in said:
                    err.print(f"  note: {line}", highlight=False, markup=False)
        except ToolchainError as e:
            res = {"spec": str(path), "ok": False, "error": e.message, "hint": e.hint, "exit": e.exit_code}
            if isinstance(e, SpecError):  # every problem, each with its path, line, unknown key and did-you-mean
                res["problems"] = [p.to_json() for p in e.problems]
            results.append(res)
            failures.append((str(path), e))
    if json_out:
        print_json(results)
    if failures:
        if len(failures) == 1:
            raise failures[0][1]
        for _, earlier in failures[:-1]:
            err.print(f"Error: {earlier.message} — {earlier.hint}", markup=False, highlight=False)
        raise failures[-1][1]


@app.command(short_help="Print the engine spec JSON Schema (for editor completion).")
def schema() -> None:
    """Print the JSON Schema of engine specs (for yaml-language-server / editor completion).

    Examples: toolchain spec schema > engine-spec.schema.json
    """
    from toolchain.cli.render import print_json
    from toolchain.specs.models import schema as spec_schema

    print_json(spec_schema())


@app.command(short_help="List every matrix cell with its engine key and profile id.")
def expand(spec: SpecArg, wide: WideOpt = False, json_out: JsonOpt = False) -> None:
    """List every matrix cell of SPEC with its engine key and profile id.

    The cell id names its GPU, batch, sequence and input lengths and TP degree; --wide prints them as columns.

    Examples:
      toolchain spec expand engine_specs/llama-3.1-8b-fp8.yaml
      toolchain spec expand engine_specs/llama-3.1-8b-fp8.yaml --wide
      toolchain spec expand engine_specs/llama-3.1-8b-fp8.yaml --json
    """
    from toolchain.artifacts.cell import for_cells
    from toolchain.cli.render import err, plural, print_json, print_table
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.matrix import Cell

    s = checked_spec(spec)  # the rules `spec validate` applies, with its message (specs.gate)
    ids = for_cells(s)
    if json_out:
        print_json({"spec": s.name, "cells": [i.to_json() for i in ids]})
        return
    shape = ["gpu", "batch", "seq", "input", "tp"] if wide else []

    def shape_of(c: Cell) -> list[str]:
        return [c.gpu.name, str(c.max_batch_size), str(c.max_seq_len), str(c.max_input_len), str(c.tp)]

    rows = [
        [
            i.cell.id,
            *(shape_of(i.cell) if wide else []),
            (i.engine_key or "pending")[:16],
            (i.profile_id or ("pending" if i.pending else ""))[:16],
        ]
        for i in ids
    ]
    print_table(f"{s.name}: {plural(len(ids), 'cell')}", ["cell", *shape, "engine key", "profile id"], rows)
    # why a key is pending, once per reason, in full (a 16-character cell would cut it)
    for reason in dict.fromkeys(i.pending for i in ids if i.pending):
        err.print(f"keys pending: {reason}", markup=False, highlight=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="spec")
