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
    infer_cmd,
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


def _close_progress() -> None:
    render = sys.modules.get("toolchain.cli.render")  # not imported: nothing was drawn
    if render is not None:
        render.close_all()


class _Group(TyperGroup):
    """Top-level group: the single error table for every command below it."""

    def invoke(self, ctx: Any) -> Any:
        from toolchain.errors import ToolchainError

        try:
            try:
                return super().invoke(ctx)
            finally:
                _close_progress()  # a bar left drawing would overwrite the error line or the results
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
        except ImportError as e:
            # An optional dependency (an extra) that a core-only install lacks: exit 3 with the install hint.
            from toolchain._deps import extra_for

            extra = extra_for(e.name or "")
            if extra is None:
                raise
            _traceback_when_debugging()
            raise _fail(
                f"Error: this command needs the Python package '{e.name}', which is not installed"
                f" — pip install 'toolchain[{extra}]' (or run scripts/setup.sh)",
                3,
            ) from None


app = typer.Typer(
    name="toolchain",
    cls=_Group,
    help="TensorRT-LLM toolchain: spec → plan → quantize → build → registry → Triton → serve → bench → diagnose.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from toolchain import __version__

        sys.stdout.write(f"toolchain {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit"
    ),
) -> None:
    """TensorRT-LLM toolchain: spec → plan → quantize → build → registry → Triton → serve → bench → diagnose."""


# One registration style: every command module has register(app), for a command or a command group.
COMMANDS = (
    spec_cmd,
    cache_cmd,
    triton_cmd,
    bench_cmd,
    up_cmd,
    gpus_cmd,
    plan_cmd,
    quantize_cmd,
    build_cmd,
    serve_cmd,
    infer_cmd,
    deploy_cmd,
    diagnose_cmd,
    matrix_cmd,
)
for _module in COMMANDS:
    _module.register(app)


def run() -> None:
    """Console-script entry point.

    Once the command is done, the exit handlers run and the process ends at once: tearing down torch and
    the other C extensions at interpreter exit took seconds after the last line (a terminal sat silent)."""
    import atexit
    import contextlib
    import os

    code: int | str | None = 0
    try:
        app(prog_name="toolchain")
    except SystemExit as e:
        code = e.code
    if "torch" not in sys.modules:
        sys.exit(code)
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    run()
    sys.exit(0)
