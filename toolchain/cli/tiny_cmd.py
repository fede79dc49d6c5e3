"""`toolchain tiny-checkpoint`: the tiny random-weight Llama that engine_specs/tiny.yaml quantizes and serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import ForceOpt, JsonOpt, out_dir_opt


def tiny_checkpoint(
    out: Annotated[Path, out_dir_opt("config.json, model.safetensors and the tokenizer files")],
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Write the tiny Llama (hidden 128, 2 layers, random weights, a BPE tokenizer trained here; no download)
    where a tiny spec's model.source points; `toolchain up` makes it by itself, every other command needs it
    first. An existing checkpoint there is kept unless --force.

    Examples:
      toolchain tiny-checkpoint --out .work/tiny-llama
      toolchain tiny-checkpoint --out ./tiny-llama --force --json
    """
    from toolchain.cli.render import Stages, err, print_json
    from toolchain.cli.render import out as stdout
    from toolchain.quantize.tiny import create_tiny_checkpoint

    written = create_tiny_checkpoint(out, force=force, progress=Stages())
    where = str(out.resolve())
    if json_out:
        print_json({"checkpoint": where, "written": written})
        return
    if not written:
        err.print(f"kept the checkpoint already at {where} (--force replaces it)", highlight=False, markup=False)
    stdout.print(where, highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("tiny-checkpoint")(tiny_checkpoint)
