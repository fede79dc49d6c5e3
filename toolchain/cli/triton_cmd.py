"""`toolchain triton emit|lint`: model repositories that load the first time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import CellOpt, ForceOpt, JsonOpt, RegistryOpt, SpecArg, out_dir_opt

app = typer.Typer(help="Emit and lint Triton TensorRT-LLM model repositories.", no_args_is_help=True)


@app.command(short_help="Emit a cell's Triton repository (inflight_batcher_llm or llmapi).")
def emit(
    spec: SpecArg,
    out: Annotated[Path, out_dir_opt("the model repository")],
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="Registry key, tag or digest of the engine to serve, or an engine directory"),
    ] = None,
    reference: Annotated[
        bool,
        typer.Option("--reference", help="Serve the CPU reference model (pytorch: the LLM API's CPU stand-in); no GPU"),
    ] = False,
    cell: CellOpt = None,
    registry: RegistryOpt = None,
    force: ForceOpt = False,
    engines_root: Annotated[
        str | None,
        typer.Option(
            "--engines-root",
            help="Absolute directory the engines are mounted at where the server runs (e.g. /engines); "
            "default: copy the engine into the repository",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Emit the inflight_batcher_llm repository (or the llmapi layout for runtime pytorch).

    `--reference` uses the CPU reference model in place of the tensorrtllm backend (no GPU needed).
    The tokenizer (and the reference model) are inside the repository, named relative to it. The engine is
    copied inside too (hard links), but the tensorrtllm backend needs gpt_model_path absolute, so the config
    names this repository's absolute path: after moving or copying it, emit it again (lint says so). With
    `--engines-root /engines` the configs name /engines/<engine key> instead (no path of this host) and the
    output lists what to mount there.

    Examples:
      toolchain triton emit engine_specs/tiny.yaml --reference --out ./repo
      toolchain triton emit engine_specs/llama-3.1-8b-fp8.yaml --cell h100-sxm-b64-s4096-i2048-tp1 \\
        --engine 3f2a9c1d --out ./repo --engines-root /engines
    """
    from toolchain.artifacts.cell import for_cell
    from toolchain.cli.render import err, print_json
    from toolchain.errors import UserInputError
    from toolchain.pipeline.emit import emit_cell
    from toolchain.specs.gate import checked_spec, require_reference_servable
    from toolchain.specs.matrix import expand, find_cell

    if engine == "reference":  # what --engine once also meant
        raise UserInputError("--engine names an engine (a registry key, tag or digest, or a directory)",
                             "pass --reference to serve the CPU reference model")  # fmt: skip
    if (engine is None) == (not reference):
        raise UserInputError("name what to serve: --engine KEY|DIR, or --reference", "pass exactly one of them")
    engine = engine or "reference"
    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    require_reference_servable(s, engine)
    c = find_cell(s, cell) if cell else expand(s)[0]
    standin = engine == "reference" and s.runtime == "pytorch"  # the llmapi model's CPU stand-in
    res = emit_cell(
        for_cell(c), engine, out, registry=registry, force=force, engines_root=engines_root, standin=standin
    )
    if json_out:
        print_json(res)
    else:
        what = "the CPU stand-in for TensorRT-LLM's LLM API" if standin else "the CPU reference model"
        note = (
            f" with {what} (not TensorRT-LLM), serving the {res.get('reference_weights')}" if res["reference"] else ""
        )
        err.print(f"wrote {res['repository']} for cell {c.id}{note}", highlight=False, markup=False)
        for m in res["mounts"]:
            err.print(f"  mount {m['source']} at {m['target']} ({m['what']})", highlight=False, markup=False)


@app.command(short_help="Check a repository against its engine, Triton and the backend.")
def lint(
    repo: Annotated[Path, typer.Argument(help="Model repository directory")],
    world_size: Annotated[int | None, typer.Option("--world-size", help="Ranks you will launch with")] = None,
    load: Annotated[
        bool,
        typer.Option(
            "--load",
            help="Also load the repository in the real Triton 2.51 on 127.0.0.1 (tensorrt_llm replaced by the CPU "
            "reference stand-in, not TensorRT-LLM) and send one request to each entry model",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Check a repository against its engine, Triton's model-configuration rules and the TensorRT-LLM backend;
    exit 2 on errors. Each finding is one line: file, field, what is wrong — the fix.

    Examples:
      toolchain triton lint ./repo
      toolchain triton lint ./repo --load
    """
    from dataclasses import asdict

    from toolchain.cli.render import Stages, err, print_json
    from toolchain.errors import TritonRepoError
    from toolchain.triton.lint import lint_repository

    findings = lint_repository(repo, world_size=world_size)
    loaded = None
    if load and not any(f.severity == "error" for f in findings):
        from toolchain.triton.loadcheck import load_check

        loaded = load_check(repo, progress=Stages(quiet=json_out))
        findings += loaded.findings
    if json_out:
        print_json([asdict(f) for f in findings])
    else:
        for f in findings:
            err.print(f.line(), highlight=False, markup=False)
        if loaded is not None:
            err.print(loaded.summary(), highlight=False, markup=False)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        if load and loaded is None:
            hint = "fix them first: --load starts Triton only on a repository lint passes"
        else:
            hint = "fix each (its fix follows the —), then lint again"
        raise TritonRepoError(f"{len(errors)} error(s) in {repo}, listed above", hint)
    if not json_out:
        err.print(f"ok: {repo} ({len(findings)} warning(s))")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="triton")
