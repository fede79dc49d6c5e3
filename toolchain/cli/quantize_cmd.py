"""`toolchain quantize`: ModelOpt quantization and both exports, from a spec or from flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import (
    AccuracyGate,
    CheckpointOpt,
    Device,
    DeviceMap,
    ForceOpt,
    JsonOpt,
    KVCacheFormat,
    RegistryOpt,
    RehashOpt,
    WeightFormat,
    given_thresholds,
    out_dir_opt,
)


def quantize(
    spec: Annotated[Path | None, typer.Argument(help="Engine spec (uses its model and quantization)")] = None,
    checkpoint: CheckpointOpt = None,
    weights: Annotated[WeightFormat | None, typer.Option("--weights", help="Weight format")] = None,
    kv_cache: Annotated[KVCacheFormat, typer.Option("--kv-cache", help="KV-cache format")] = KVCacheFormat.none,
    out: Annotated[Path | None, out_dir_opt("trtllm/, hf/, manifest.json")] = None,
    device: Annotated[Device, typer.Option("--device", help="Where ModelOpt calibrates")] = Device.cpu,
    device_map: Annotated[
        DeviceMap | None,
        typer.Option(
            "--device-map", help="Spread a model larger than one GPU over the visible GPUs (with --device cuda)"
        ),
    ] = None,
    calib_dataset: Annotated[
        str, typer.Option("--calib-dataset", help="Calibration text: builtin, a .txt/.jsonl file, or hf:<name>")
    ] = "builtin",
    calib_samples: Annotated[int, typer.Option("--calib-samples", min=1, help="Calibration samples")] = 64,
    calib_seq_len: Annotated[int, typer.Option("--calib-seq-len", min=8, help="Tokens per sample")] = 256,
    calib_batch_size: Annotated[int, typer.Option("--calib-batch-size", min=1, help="Samples per batch")] = 4,
    calib_seed: Annotated[int, typer.Option("--calib-seed", help="Seed of the sample draw")] = 1234,
    awq_group_size: Annotated[int, typer.Option("--awq-group-size")] = 128,
    tp: Annotated[int, typer.Option("--tp", min=1)] = 1,
    pp: Annotated[int, typer.Option("--pp", min=1)] = 1,
    gate: Annotated[
        AccuracyGate,
        typer.Option(
            "--gate", help="The fake-quant diagnostic beside the runtime-numerics gate: auto, fakequant, dequant (none)"
        ),
    ] = AccuracyGate.auto,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Accept *.bin (pickle) weights")] = False,
    force: ForceOpt = False,
    rehash: RehashOpt = False,
    registry: RegistryOpt = None,
    max_rel_logit_error: Annotated[
        float | None, typer.Option("--max-rel-logit-error", min=0, help="With --checkpoint: gate on this threshold")
    ] = None,
    min_top1_agreement: Annotated[
        float | None,
        typer.Option("--min-top1-agreement", min=0, max=1, help="With --checkpoint: gate on this threshold"),
    ] = None,
    max_ppl_increase: Annotated[
        float | None, typer.Option("--max-ppl-increase", min=0, help="With --checkpoint: gate on this threshold")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Quantize a checkpoint with ModelOpt; export the TRT-LLM checkpoint and the unified HF checkpoint.

    With a SPEC, the spec's model and quantization are used, one checkpoint per parallel mapping is written to
    the cache, and --registry also stores each one there; the spec's accuracy thresholds gate each one.

    With --checkpoint, --max-rel-logit-error, --min-top1-agreement and --max-ppl-increase gate the result (the
    spec defaults fill the ones not given); without them it is not gated, and a warning names each figure
    worse than the spec defaults.

    Examples:
      toolchain quantize engine_specs/tiny.yaml
      toolchain quantize --checkpoint ./tiny-llama --weights fp8 --kv-cache fp8 --out ./tiny-fp8
    """
    from toolchain.artifacts.recipe import Recipe
    from toolchain.cli.render import Stages, err, print_json
    from toolchain.cli.render import out as out_console
    from toolchain.errors import UserInputError
    from toolchain.pipeline.quantize import QuantizeJob, run_quantize
    from toolchain.quantize import accuracy

    if device_map is not None and device is not Device.cuda:
        raise UserInputError(
            "--device-map spreads the model over GPUs", "add --device cuda, or drop --device-map on CPU"
        )
    from toolchain.specs.models import AccuracyGate as Limits

    given = given_thresholds(max_rel_logit_error, min_top1_agreement, max_ppl_increase)
    target: Path | QuantizeJob
    if spec is not None:
        if given:
            raise UserInputError(
                "a SPEC's accuracy thresholds come from its quantization.accuracy",
                "set them in the spec, or drop --max-rel-logit-error/--min-top1-agreement/--max-ppl-increase",
            )
        if checkpoint is not None or weights is not None:
            raise UserInputError(
                "give either a SPEC or --checkpoint/--weights, not both",
                "drop --checkpoint/--weights to use the spec's model and quantization",
            )
        target = spec
    else:
        if checkpoint is None or weights is None or out is None:
            raise UserInputError(
                "without a SPEC, --checkpoint, --weights and --out are required",
                "e.g. toolchain quantize --checkpoint DIR --weights fp8 --kv-cache fp8 --out DIR",
            )
        if registry:
            raise UserInputError("--registry stores a spec's checkpoints", "give a SPEC, or drop --registry")
        recipe = Recipe(
            weights.value,
            kv_cache.value,
            awq_group_size,
            calib_dataset,
            calib_samples,
            calib_seq_len,
            calib_batch_size,
            calib_seed,
            "bfloat16",
            tp,
            pp,
        )
        target = QuantizeJob(checkpoint, recipe, out, accuracy_limits=Limits(**given) if given else None)
    outcomes = run_quantize(
        target,
        out=out,
        device=device.value,
        device_map=device_map.value if device_map is not None else None,
        force=force,
        rehash=rehash,
        allow_pickle=allow_pickle,
        gate=gate.value,
        registry=registry,
        progress=Stages(),
    )
    for o in outcomes:
        res, r, m = o.result, o.job.recipe, o.result.manifest
        acc = m["accuracy"][m["accuracy"]["gate"]]
        for n in res.notes:
            err.print(f"note: {n}", highlight=False)
        if o.job.accuracy_limits is None:  # --checkpoint without thresholds: not gated, but never silently worse
            worse = accuracy.failures(accuracy.from_json(acc), Limits())
            if worse:
                err.print(
                    f"warning: not gated, and worse than the spec defaults: {'; '.join(worse)} — pass "
                    "--max-rel-logit-error/--min-top1-agreement/--max-ppl-increase to gate",
                    highlight=False,
                    markup=False,
                )
        (err if json_out else out_console).print(  # the result is data: stdout (stderr under --json)
            f"{'reused' if res.reused else 'wrote'} {res.out} ({r.weights}, kv {r.kv_cache}, tp{r.tp} pp{r.pp}): "
            f"rel logit err {acc['rel_logit_error']:.4f}, top-1 {acc['top1_agreement']:.4f}, "
            f"ppl {acc['ppl_increase']:+.2%} [{accuracy.judged(m['accuracy'])}]{accuracy.beside(m['accuracy'])}; "
            f"{m['wall_time_s']:.1f}s, peak RSS {m['peak_rss_mb']:.0f} MB",
            highlight=False,
            markup=False,
        )
        if o.stored_as:
            err.print(f"quantized checkpoint in {o.registry_url} as {o.stored_as}", highlight=False)
    if json_out:
        results = [o.to_json() for o in outcomes]
        print_json(results if len(results) > 1 else results[0])


def register(app: typer.Typer) -> None:
    app.command()(quantize)
