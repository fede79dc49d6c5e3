"""`toolchain accuracy`: judge an existing quantized checkpoint again, with the runtime's numerics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import Device, JsonOpt, given_thresholds


def accuracy(
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="The original Hugging Face checkpoint")],
    quantized: Annotated[Path, typer.Option("--quantized", help="What `toolchain quantize --out` wrote")],
    max_rel_logit_error: Annotated[
        float | None, typer.Option("--max-rel-logit-error", min=0, help="Threshold (default: quantize's)")
    ] = None,
    min_top1_agreement: Annotated[
        float | None, typer.Option("--min-top1-agreement", min=0, max=1, help="Threshold (default: quantize's)")
    ] = None,
    max_ppl_increase: Annotated[
        float | None, typer.Option("--max-ppl-increase", min=0, help="Threshold (default: quantize's)")
    ] = None,
    device: Annotated[Device, typer.Option("--device", help="Where the exports run")] = Device.cpu,
    json_out: JsonOpt = False,
) -> None:
    """Judge a quantized checkpoint's exports (hf/, trtllm/) as the runtime runs them; exit 5 on a miss.

    Each export runs with its weights dequantized, activations quantized with its input scales and the KV
    cache with its KV scales, against the original on held-out text; a threshold missed by either export
    fails (exit 5), naming the export. Thresholds not given are quantize's defaults.

    Examples:
      toolchain accuracy --checkpoint .work/tiny-llama --quantized ./tiny-fp8
      toolchain accuracy --checkpoint ./tiny-llama --quantized ./q --min-top1-agreement 0.7 --json
    """
    from toolchain.cli.render import err, print_json
    from toolchain.cli.render import out as stdout
    from toolchain.quantize import runtime
    from toolchain.specs.models import AccuracyGate

    given = given_thresholds(max_rel_logit_error, min_top1_agreement, max_ppl_increase)
    limits = AccuracyGate(**given)
    verdict = runtime.judge(checkpoint, quantized, limits, device=device.value)
    for note in verdict.notes:
        err.print(f"note: {note}", highlight=False, markup=False)
    if json_out:
        print_json(verdict.to_json())
    else:
        for name, acc in verdict.results.items():
            fails = verdict.failures[name]
            stdout.print(
                f"{name}/: rel logit err {acc.rel_logit_error:.4f}, top-1 {acc.top1_agreement:.4f}, "
                f"ppl {acc.ppl_increase:+.2%} ({acc.dtype}, {acc.tokens} tokens): "
                + ("pass" if not fails else "FAIL: " + "; ".join(fails)),
                highlight=False,
                markup=False,
            )
    runtime.gate(verdict.results, limits)  # exit 5, naming the export, when either misses a threshold


def register(app: typer.Typer) -> None:
    app.command(short_help="Judge a quantized checkpoint as the runtime runs it")(accuracy)
