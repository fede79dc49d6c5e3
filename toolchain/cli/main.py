"""The `toolchain` command. Library imports happen inside commands so --help stays fast."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from toolchain import settings
from toolchain.cli import (
    bench_cmd,
    build_cmd,
    cache_cmd,
    deploy_cmd,
    diagnose_cmd,
    gpus_cmd,
    matrix_cmd,
    plan_cmd,
    quantize_cmd,
    serve_cmd,
    spec_cmd,
    triton_cmd,
    up_cmd,
)


def _fail(line: str, code: int) -> typer.Exit:
    """Print one line on stderr and return the Exit that carries the code."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    return typer.Exit(code)


def _traceback_when_debugging() -> None:
    """With TOOLCHAIN_DEBUG=1, the traceback of the error being handled, its causes included."""
    if settings.debug():
        import traceback

        traceback.print_exc()


class _Group(TyperGroup):
    """Top-level group: the single error table for every command below it."""

    def invoke(self, ctx: Any) -> Any:
        from toolchain.errors import ToolchainError

        try:
            return super().invoke(ctx)
        except ToolchainError as e:
            _traceback_when_debugging()
            hint = f" — {e.hint}" if e.hint else ""
            raise _fail(f"Error: {e.message}{hint}", e.exit_code) from None
        except (OSError, ValueError) as e:
            # A file or value from the user that the library did not anticipate: one line, not a traceback.
            _traceback_when_debugging()
            what = f"{type(e).__name__}: {e}"
            raise _fail(f"Error: {what} — check the paths and values given; TOOLCHAIN_DEBUG=1 shows where", 1) from None
        except KeyboardInterrupt:
            raise _fail("Interrupted; nothing half-written was kept.", 130) from None


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
app.add_typer(cache_cmd.app, name="cache")
app.add_typer(triton_cmd.app, name="triton")
app.add_typer(bench_cmd.app, name="bench")
for mod in (up_cmd, gpus_cmd, plan_cmd, quantize_cmd, build_cmd, serve_cmd, deploy_cmd, diagnose_cmd, matrix_cmd):
    mod.register(app)


def run() -> None:
    """Console-script entry point."""
    app(prog_name="toolchain")


if __name__ == "__main__":
    run()
    sys.exit(0)
