"""`toolchain build`: build (or fetch) the artifact of each matrix cell."""

from __future__ import annotations

from typing import Annotated

import typer

from toolchain.cli.options import CellOpt, DryRunOpt, ForceOpt, JsonOpt, RegistryOpt, RehashOpt, SpecArg, timeout_opt


def build(
    spec: SpecArg,
    cell: CellOpt = None,
    all_cells: Annotated[bool, typer.Option("--all", help="Every matrix cell")] = False,
    registry: RegistryOpt = None,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    rehash: RehashOpt = False,
    timeout: Annotated[float | None, timeout_opt("a build")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Build each cell's engine (runtime tensorrt) or LLM-API profile (runtime pytorch); skip cached keys.

    Examples:
      toolchain build engine_specs/llama-3.1-8b-fp8.yaml --all --dry-run
      toolchain build engine_specs/llama-3.1-8b-fp8.yaml --cell h100-sxm-b64-s4096-i2048-tp1 --registry s3://b/p
    """
    import shlex

    from toolchain.artifacts.cell import for_cells
    from toolchain.cli.render import Stages, err, out, print_json
    from toolchain.compile.draft import builds_for
    from toolchain.errors import NeedsGPUError, UserInputError
    from toolchain.registry import open_registry
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.matrix import expand, find_cell

    if bool(cell) == all_cells:
        raise UserInputError("choose --cell ID or --all", "`toolchain spec expand SPEC` lists cell ids")
    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    cells = [find_cell(s, cell)] if cell else expand(s)
    reg = open_registry(registry)
    results: list[dict[str, object]] = []
    stopped: NeedsGPUError | None = None
    stages = Stages()
    arts = for_cells(s, cells)
    held = reg.existing(a.engine_key for a in arts if a.engine_key)  # one listing, not a request per cell
    for art in arts:
        try:  # draft-target: the draft engine first, then the cell's (compile.draft)
            rs = builds_for(
                art, reg, dry_run=dry_run, force=force, timeout=timeout, progress=stages, held=held, rehash=rehash
            )
        except NeedsGPUError as e:  # with --json, still print what is known (the plan), then exit 4
            if not json_out:
                raise
            rs = builds_for(art, reg, dry_run=True, force=force)
            results += [r.to_json() | {"status": "needs-gpu", "error": e.message, "hint": e.hint} for r in rs]
            stopped = e
            break
        for r in rs:
            c = r.cell
            results.append(r.to_json())
            if not json_out:  # the plan and the outcome are data: stdout; notes are narration
                role = " (draft)" if c.spec.name != s.name else ""
                out.print(f"{r.status:9} {c.id}{role}  key {r.key}", highlight=False, markup=False)
                if dry_run and r.command:
                    out.print(f"          {shlex.join(r.command)}", highlight=False, markup=False, soft_wrap=True)
                for n in r.notes:
                    err.print(f"          note: {n}", highlight=False, markup=False)
    if json_out:
        print_json({"spec": s.name, "registry": reg.url, "dry_run": dry_run, "cells": results})
    if stopped is not None:
        raise stopped


def register(app: typer.Typer) -> None:
    app.command()(build)
