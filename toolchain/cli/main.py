"""The `toolchain` command. Library imports happen inside commands so --help stays fast."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from toolchain import settings
from toolchain.cli import (
    accuracy_cmd,
    build_cmd,
    cache_cmd,
    deploy_cmd,
    diagnose_cmd,
    dynamo_cmd,
    gpus_cmd,
    infer_cmd,
    job_cmd,
    matrix_cmd,
    plan_cmd,
    quantize_cmd,
    serve_cmd,
    spec_cmd,
    tiny_cmd,
    triton_cmd,
    up_cmd,
)


def _wants_json(ctx: Any) -> bool:
    """Whether the command line asks for JSON on stdout (``--json``, or ``--format json``), read from the
    arguments before they are parsed, so a usage error is answered in JSON too."""
    protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []
    args = [*protected, *ctx.args]
    if "--" in args:
        args = args[: args.index("--")]
    pairs = zip(args, [*args[1:], ""], strict=True)
    return "--json" in args or "--format=json" in args or any(a == "--format" and b == "json" for a, b in pairs)


class _Failure:
    """Renders one failure: the ``Error:`` line on stderr and, under ``--json``, one JSON document on stdout.
    Both go through ``toolchain.redact.text``: no error line shows a password, token or signature, whatever
    the message quotes (a URL the user gave, a server's answer)."""

    def __init__(self, json_out: bool) -> None:
        self.json_out = json_out

    def document(self, message: str, hint: str, code: int) -> None:
        from toolchain import redact
        from toolchain.cli.render import json_printed, print_json

        message, hint = redact.text(message), redact.text(hint)
        if self.json_out and not json_printed():  # a command that printed its own document (with the error) keeps it
            print_json({"error": message, "hint": hint, "exit": code})
            sys.stdout.flush()

    def __call__(self, message: str, hint: str, code: int) -> typer.Exit:
        """Print the failure and return the Exit that carries the code."""
        from toolchain import redact

        self.document(message, hint, code)
        message, hint = redact.text(message), redact.text(hint)
        sys.stderr.write(f"Error: {message}" + (f" — {hint}" if hint else "") + "\n")
        sys.stderr.flush()
        return typer.Exit(code)


def _traceback_when_debugging() -> None:
    """With TOOLCHAIN_DEBUG=1, the traceback of the error being handled, its causes included (secrets hidden:
    the messages it quotes are the same the error line would show)."""
    if settings.debug():
        import traceback

        from toolchain import redact

        sys.stderr.write(redact.text(traceback.format_exc()))


def _close_progress() -> None:
    render = sys.modules.get("toolchain.cli.render")  # not imported: nothing was drawn
    if render is not None:
        render.close_all()


def _transient(e: BaseException) -> bool:
    from toolchain import http

    return http.transient(e)


def _transient_message(e: BaseException) -> str:
    """An untranslated network failure in words: what it says, or its kind ('connect timeout')."""
    import re

    words = re.sub(r"(?<!^)(?=[A-Z])", " ", type(e).__name__.removesuffix("Error")).lower().strip()
    said = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"a network request failed ({words}){': ' + said if said else ''}"


def _is_usage_error(e: BaseException) -> bool:
    """click's UsageError and its kinds (NoSuchOption, BadParameter, MissingParameter), from click or the copy of
    click that Typer carries (``typer._click``): matched by class name, not by one module's class."""
    return any(c.__name__ == "UsageError" for c in type(e).__mro__)


# Command groups whose options are built from a pydantic model (`bench`: BenchOptions): imported and built only
# when the command line names them, so `toolchain --help` and every other command start without them (pydantic's
# models cost more than the rest of the CLI together). Each module has a Typer ``app``; until it is built the
# listing shows SUMMARIES' line for it, in its place among the groups (after the group named here).
LAZY = {"bench": ("toolchain.cli.bench_cmd", "triton")}


class _Deferred(TyperCommand):
    """A lazy group's place in the listing: its name and summary, built into the real group when asked for."""

    def __init__(self, name: str, module: str) -> None:
        super().__init__(name, short_help=SUMMARIES[name])
        self.module = module


class _Group(TyperGroup):
    """Top-level group: the single error table for every command below it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ordered: dict[str, Any] = {}
        for name, command in self.commands.items():
            ordered[name] = command
            ordered.update({lazy: _Deferred(lazy, m) for lazy, (m, after) in LAZY.items() if after == name})
        ordered.update({lazy: _Deferred(lazy, m) for lazy, (m, _) in LAZY.items() if lazy not in ordered})
        self.commands = ordered

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Deferred):  # named on the command line (or walked): build it, in its place
            import importlib

            sub: typer.Typer = importlib.import_module(command.module).app
            _keep_examples_as_lines(sub)
            built = typer.main.get_command(sub)
            built.name, built.short_help = cmd_name, command.short_help
            self.commands[cmd_name] = built
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The listing of `toolchain --help`: a lazy group's summary without building it."""
        rows = [(n, c) for n, c in self.commands.items() if not c.hidden]
        if rows:
            limit = formatter.width - 6 - max(len(n) for n, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(n, c.get_short_help_str(limit)) for n, c in rows])

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        # Help piped to a file or another program is never wrapped nor cut to a terminal's width: it is read whole
        # (on a terminal click fits it to the screen, at most 80 columns).
        if parent is None and not sys.stdout.isatty():
            extra.setdefault("terminal_width", 100_000)
            extra.setdefault("max_content_width", 100_000)
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        from toolchain.cli.render import json_printed
        from toolchain.errors import ToolchainError

        fail = _Failure(_wants_json(ctx))
        json_printed(reset=True)
        from toolchain import logs

        logs.configure()  # TOOLCHAIN_DEBUG=1: each HTTP request and child process on stderr (docs/http.md)
        try:
            try:
                return super().invoke(ctx)
            finally:
                _close_progress()  # a bar left drawing would overwrite the error line or the results
        except ToolchainError as e:
            _traceback_when_debugging()
            raise fail(e.message, e.hint, e.exit_code) from None
        except (OSError, ValueError) as e:
            if _transient(e):  # a connection refused or timed out that no library translated: retry later
                _traceback_when_debugging()
                raise fail(_transient_message(e), "check the network and the service, then try again", 75) from None
            # A file or value from the user that the library did not anticipate: one line, not a traceback.
            _traceback_when_debugging()
            raise fail(
                f"{type(e).__name__}: {e}", "check the paths and values given; TOOLCHAIN_DEBUG=1 shows where", 1
            ) from None
        except KeyboardInterrupt:
            fail.document("interrupted", "nothing half-written was kept", 130)
            sys.stderr.write("Interrupted; nothing half-written was kept.\n")
            raise typer.Exit(130) from None
        except ImportError as e:
            # An optional dependency (an extra) that a core-only install lacks: exit 3 with the install hint.
            from toolchain._deps import extra_for

            extra = extra_for(e.name or "")
            if extra is None:
                raise
            _traceback_when_debugging()
            raise fail(
                f"this command needs the Python package '{e.name}', which is not installed",
                f"pip install 'toolchain[{extra}]' (or run scripts/setup.sh)",
                3,
            ) from None
        except Exception as e:
            if _is_usage_error(e):
                # The parser's own usage errors (unknown option, bad value, missing argument): one line like
                # every other mistake (click printed its usage block and a "Try" line first), naming the help.
                sub = getattr(e, "ctx", None)
                where = sub.command_path if sub is not None else "toolchain"
                message = str(e.format_message()).replace("Value error, ", "").rstrip(".")  # type: ignore[attr-defined]
                raise fail(message, f"see `{where} --help`", int(getattr(e, "exit_code", 2))) from None
            if _transient(e):  # a library's connection error or timeout (httpx, botocore): exit 75, one line
                _traceback_when_debugging()
                raise fail(_transient_message(e), "check the network and the service, then try again", 75) from None
            # Other parser exceptions that carry an exit code: under --json the message is the JSON document too.
            code = getattr(e, "exit_code", None)
            if hasattr(e, "format_message") and isinstance(code, int) and code:
                fail.document(str(e.format_message()), "run the command with --help for its usage", code)
            raise


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


# One registration style: every command module has register(app), for a command or a command group (a group built
# from a pydantic model is named in LAZY instead).
COMMANDS = (
    spec_cmd,
    cache_cmd,
    triton_cmd,
    up_cmd,
    gpus_cmd,
    plan_cmd,
    quantize_cmd,
    accuracy_cmd,
    build_cmd,
    serve_cmd,
    infer_cmd,
    deploy_cmd,
    diagnose_cmd,
    matrix_cmd,
    job_cmd,
    dynamo_cmd,
    tiny_cmd,
)
for _module in COMMANDS:
    _module.register(app)

# The one-line summaries `toolchain --help` lists: each whole on one line of an 80-column terminal (click cuts a
# longer first sentence with "..."); a command's own --help says the rest.
SUMMARIES = {
    "up": "Run one cell end to end: quantize to serve and bench.",
    "gpus": "List catalog GPUs and the GPUs NVML sees here.",
    "plan": "Fit, KV budget, latency floors and fleet size per cell.",
    "quantize": "Quantize a checkpoint with ModelOpt and export it.",
    "build": "Build or fetch each cell's engine or LLM-API profile.",
    "serve": "Start tritonserver on a repository; wait until ready.",
    "infer": "Send one prompt; stream the answer, timing on stderr.",
    "deploy": "Write an image context and Kubernetes manifests.",
    "diagnose": "Findings and actions from bench results or live metrics.",
    "matrix": "CI or Kubernetes jobs per cell and quantize group.",
    "tiny-checkpoint": "Write the tiny random Llama a tiny spec points at.",
    "spec": "Validate specs, print their schema, expand the matrix.",
    "cache": "The engine registry: local dir, s3://, hf://, oci://.",
    "triton": "Emit and lint Triton TensorRT-LLM model repositories.",
    "bench": "Benchmark a deployment: latency, throughput, goodput.",
    "job": "One pod of `matrix --format kubernetes|argo`.",
    "dynamo": "NVIDIA Dynamo: plan pools, deploy, run here (mocker).",
}
for _info in app.registered_commands:
    _name = _info.name or (_info.callback.__name__.replace("_", "-") if _info.callback else "")
    if _name in SUMMARIES and _info.short_help is None:
        _info.short_help = SUMMARIES[_name]
for _group in app.registered_groups:
    if isinstance(_group.name, str) and _group.name in SUMMARIES:
        _group.short_help = SUMMARIES[_group.name]


def _keep_examples_as_lines(t: typer.Typer) -> None:
    """Click rewraps every help paragraph into one block, which ran a command's examples together; a
    paragraph led by a line holding only ``\\b`` is printed as written (click's own marker)."""
    import re

    for info in t.registered_commands:
        fn = info.callback
        doc = fn.__doc__ if fn is not None else None
        if fn is not None and doc and "Examples:" in doc and "\b\n" not in doc:
            fn.__doc__ = re.sub(r"(\n[ \t]*\n)([ \t]*)Examples:", "\\1\\2\b\n\\2Examples:", doc, count=1)
    for group in t.registered_groups:
        if group.typer_instance is not None:
            _keep_examples_as_lines(group.typer_instance)


_keep_examples_as_lines(app)


def command_tree() -> Any:
    """The whole click command of `toolchain`, every lazy group built: what a walk over every command and option
    (the docs' checks, completion scripts) reads."""
    root = typer.main.get_command(app)
    assert isinstance(root, _Group)
    for name in LAZY:
        root.get_command(None, name)
    return root


def _redacted_excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """An unknown error keeps its traceback, with the secrets it quotes hidden (``toolchain.redact``)."""
    import traceback

    from toolchain import redact

    sys.stderr.write(redact.text("".join(traceback.format_exception(kind, value, tb))))


def run() -> None:
    """Console-script entry point.

    Once the command is done, the exit handlers run and the process ends at once: tearing down torch and
    the other C extensions at interpreter exit took seconds after the last line (a terminal sat silent)."""
    import atexit
    import contextlib
    import os

    code: int | str | None = 0
    sys.excepthook = _redacted_excepthook
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
