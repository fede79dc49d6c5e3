"""`toolchain quantize`: ModelOpt quantization and both exports, from a spec or from flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import ForceOpt, JsonOpt


def register(app: typer.Typer) -> None:
    @app.command()
    def quantize(
        spec: Annotated[Path | None, typer.Argument(help="Engine spec (uses its model and quantization)")] = None,
        model: Annotated[Path | None, typer.Option("--model", help="Hugging Face checkpoint directory")] = None,
        fmt: Annotated[str | None, typer.Option("--format", help="fp8|int4_awq|w4a8_awq|int8_sq|int8_wo|nvfp4")] = None,
        kv_cache: Annotated[str, typer.Option("--kv-cache", help="fp8 or none")] = "none",
        out: Annotated[
            Path | None, typer.Option("--out", help="Output directory (trtllm/, hf/, manifest.json)")
        ] = None,
        device: Annotated[str, typer.Option("--device", help="cpu or cuda")] = "cpu",
        device_map: Annotated[
            str | None,
            typer.Option(
                "--device-map",
                help="Spread a model larger than one GPU over the visible GPUs: auto|balanced|sequential "
                "(with --device cuda)",
            ),
        ] = None,
        dataset: Annotated[
            str, typer.Option("--dataset", help="builtin, a .txt/.jsonl file, or hf:<name>")
        ] = "builtin",
        samples: Annotated[int, typer.Option("--samples", min=1)] = 64,
        seq_len: Annotated[int, typer.Option("--seq-len", min=8)] = 256,
        batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 4,
        seed: Annotated[int, typer.Option("--seed")] = 1234,
        awq_group_size: Annotated[int, typer.Option("--awq-group-size")] = 128,
        tp: Annotated[int, typer.Option("--tp", min=1)] = 1,
        pp: Annotated[int, typer.Option("--pp", min=1)] = 1,
        gate: Annotated[str, typer.Option("--gate", help="auto|fakequant|dequant accuracy check")] = "auto",
        allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Accept *.bin (pickle) weights")] = False,
        force: ForceOpt = False,
        rehash: Annotated[
            bool,
            typer.Option(
                "--rehash",
                help="Reusing an existing output: read every file again instead of trusting"
                " its verified stat signatures",
            ),
        ] = False,
        registry: Annotated[
            str | None, typer.Option("--registry", help="Also store the result in this registry (spec mode)")
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Quantize a checkpoint with ModelOpt; export the TRT-LLM checkpoint and the unified HF checkpoint.

        Examples:
          toolchain quantize engine_specs/tiny.yaml
          toolchain quantize --model ./tiny-llama --format fp8 --kv-cache fp8 --out ./tiny-fp8
        """
        from toolchain.artifacts.cell import for_cells
        from toolchain.artifacts.recipe import Recipe, is_unquantized
        from toolchain.artifacts.source import source_dir
        from toolchain.cli.render import Stages, err, print_json
        from toolchain.cli.render import out as out_console
        from toolchain.errors import UserInputError
        from toolchain.quantize.run import quantize as run_quantize

        stages = Stages()
        if device_map is not None and device != "cuda":
            raise UserInputError(
                "--device-map spreads the model over GPUs", "add --device cuda, or drop --device-map on CPU"
            )
        jobs: list[tuple[Path, Recipe, Path, object, bool, str | None, str | None]] = []
        if spec is not None:
            if model is not None or fmt is not None:
                raise UserInputError(
                    "give either a SPEC or --model/--format, not both",
                    "drop --model/--format to use the spec's model and quantization",
                )
            from toolchain.specs.loader import load_spec
            from toolchain.specs.speculative import draft_spec

            s = load_spec(spec)
            has_draft = s.speculative is not None and s.speculative.draft is not None
            todo = [x for x in (s, draft_spec(s) if has_draft else None) if x is not None and not is_unquantized(x)]
            if not todo:
                raise UserInputError(
                    f"spec {s.name} asks for no quantization",
                    "nothing to do; `toolchain build` converts the checkpoint directly",
                )
            for sq in todo:  # the model, then a draft-target spec's draft model
                src = source_dir(sq)
                by_mapping = {(a.cell.tp, a.cell.pp): a for a in for_cells(sq)}
                for mapping in sorted(by_mapping):
                    art = by_mapping[mapping]
                    digest = (art.source or {}).get("digest")
                    dest = out if (out and len(jobs) == 0) else art.quantized_dir
                    acc = sq.quantization.accuracy
                    jobs.append((src, art.recipe, dest, acc, not force, digest, art.quantized_key))
        else:
            if model is None or fmt is None or out is None:
                raise UserInputError(
                    "without a SPEC, --model, --format and --out are required",
                    "e.g. toolchain quantize --model DIR --format fp8 --kv-cache fp8 --out DIR",
                )
            r = Recipe(fmt, kv_cache, awq_group_size, dataset, samples, seq_len, batch_size, seed, "bfloat16", tp, pp)
            jobs.append((model, r, out, None, False, None, None))
        results = []
        for src, r, dest, limits, reuse, digest, qkey in jobs:
            res = run_quantize(
                src,
                r,
                dest,
                device=device,
                device_map=device_map,
                force=force,
                allow_pickle=allow_pickle,
                accuracy_limits=limits,
                gate_method=gate,
                reuse=reuse,
                rehash=rehash,
                input_digest=digest,
                progress=stages,
            )
            m = res.manifest
            acc = m["accuracy"][m["accuracy"]["gate"]]
            for n in res.notes:
                err.print(f"note: {n}", highlight=False)
            (err if json_out else out_console).print(  # the result is data: stdout (stderr under --json)
                f"{'reused' if res.reused else 'wrote'} {res.out} ({r.weights}, kv {r.kv_cache}, tp{r.tp} pp{r.pp}): "
                f"rel logit err {acc['rel_logit_error']:.3f}, top-1 {acc['top1_agreement']:.2f}, "
                f"ppl {acc['ppl_increase']:+.1%} [{m['accuracy']['gate']}]; "
                f"{m['wall_time_s']:.1f}s, peak RSS {m['peak_rss_mb']:.0f} MB",
                highlight=False,
                markup=False,
            )
            results.append({"out": str(res.out), "reused": res.reused, "manifest": m})
            if registry and qkey is not None:
                from toolchain.registry import open_registry

                reg = open_registry(registry)
                key = qkey
                if not reg.exists(key):
                    reg.put(
                        key,
                        res.out,
                        kind="quantized-checkpoint",
                        provenance={"recipe": r.to_json(), "input_digest": m["input_digest"]},
                    )
                err.print(f"quantized checkpoint in {reg.url} as {key}", highlight=False)
        if json_out:
            print_json(results if len(results) > 1 else results[0])
