"""Option aliases shared by every command group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecArg = Annotated[Path, typer.Argument(help="Engine spec YAML (see engine_specs/)", show_default=False)]
SpecsArg = Annotated[list[Path], typer.Argument(help="One or more engine spec YAML files", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout")]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL: a local path, s3://bucket/prefix or hf://org/repo "
        "(default: $TOOLCHAIN_REGISTRY, else $TOOLCHAIN_CACHE/registry)",
    ),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would happen; change nothing")]
CellOpt = Annotated[str | None, typer.Option("--cell", help="One matrix cell id (see `toolchain spec expand`)")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace existing output / rebuild")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")]
