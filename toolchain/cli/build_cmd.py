"""`toolchain build`: build (or fetch) the artifact of each matrix cell."""

from __future__ import annotations

from typing import Annotated

import typer

from toolchain.cli.options import CellOpt, DryRunOpt, ForceOpt, JsonOpt, RegistryOpt, SpecArg


def register(app: typer.Typer) -> None:
    @app.command()
    def build(
        spec: SpecArg,
        cell: CellOpt = None,
        all_cells: Annotated[bool, typer.Option("--all", help="Every matrix cell")] = False,
        registry: RegistryOpt = None,
        dry_run: DryRunOpt = False,
        force: ForceOpt = False,
        timeout: Annotated[float | None, typer.Option("--timeout", help="Kill a build after this many seconds")] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Build each cell's engine (runtime tensorrt) or LLM-API profile (runtime pytorch); skip cached keys.

        Examples:
          toolchain build engine_specs/llama-3.1-8b-fp8.yaml --all --dry-run
          toolchain build engine_specs/llama-3.1-8b-fp8.yaml --cell h100-sxm-b64-s4096-i2048-tp1 --registry s3://b/p
        """
        import shlex

        from toolchain.artifacts.cell import for_cells
        from toolchain.cli.render import err, print_json
        from toolchain.compile.engine import build_cell, plan_cell_build
        from toolchain.errors import UserInputError
        from toolchain.registry import open_registry
        from toolchain.specs.loader import load_spec
        from toolchain.specs.matrix import expand, find_cell

        if bool(cell) == all_cells:
            raise UserInputError("choose --cell ID or --all", "`toolchain spec expand SPEC` lists cell ids")
        s = load_spec(spec)
        cells = [find_cell(s, cell)] if cell else expand(s)
        reg = open_registry(registry)
        results = []
        arts = for_cells(s, cells)
        held = reg.existing(a.engine_key for a in arts if a.engine_key)  # one listing, not a request per cell
        for art in arts:
            c = art.cell
            r = (
                plan_cell_build(art, reg, force=force, held=held)
                if dry_run
                else build_cell(art, reg, force=force, timeout=timeout, held=held)
            )
            results.append(r)
            if not json_out:
                err.print(f"{r.status:9} {c.id}  key {r.key}", highlight=False, markup=False)
                if dry_run and r.command:
                    err.print(f"          {shlex.join(r.command)}", highlight=False, markup=False)
                for n in r.notes:
                    err.print(f"          note: {n}", highlight=False, markup=False)
        if json_out:
            print_json(
                {"spec": s.name, "registry": reg.url, "dry_run": dry_run, "cells": [r.to_json() for r in results]}
            )
