"""The `toolchain` command. Library imports happen inside commands so --help stays fast."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import typer
from typer.core import TyperGroup

from toolchain.cli import gpus_cmd, plan_cmd, spec_cmd


class _ExpectedFailure(click.ClickException):
    """A ToolchainError rendered as one line: ``Error: <what> — <next step>``."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


class _Group(TyperGroup):
    """Top-level group: the single error table for every command below it."""

    def invoke(self, ctx: click.Context) -> Any:
        from toolchain.errors import ToolchainError

        try:
            return super().invoke(ctx)
        except ToolchainError as e:
            if os.environ.get("TOOLCHAIN_DEBUG") == "1":
                import traceback

                traceback.print_exc()
            hint = f" — {e.hint}" if e.hint else ""
            raise _ExpectedFailure(f"Error: {e.message}{hint}", e.exit_code) from None
        except KeyboardInterrupt:
            raise _ExpectedFailure("Interrupted; nothing half-written was kept.", 130) from None


app = typer.Typer(
    name="toolchain",
    cls=_Group,
    help="TensorRT-LLM toolchain: spec → plan → quantize → build → registry → Triton → serve → bench → diagnose.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(spec_cmd.app, name="spec")
for mod in (gpus_cmd, plan_cmd):
    mod.register(app)


def run() -> None:
    """Console-script entry point."""
    app(prog_name="toolchain")


if __name__ == "__main__":
    run()
    sys.exit(0)
