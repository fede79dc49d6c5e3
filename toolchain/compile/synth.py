"""Synthesise the exact `trtllm-build` command for one matrix cell, and predict the engine's
``build_config`` TensorRT-LLM will write (its automatic adjustments included: NVIDIA/TensorRT-LLM
tensorrt_llm/builder.py and _common.py), so a built engine can be checked for drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.compile.flags import check_args
from toolchain.compile.speculative import adjusted_shape, expected_feature_config, feature_args
from toolchain.errors import CompatibilityError
from toolchain.specs.families import CONVERTERS  # the per-model converters of unquantized checkpoints
from toolchain.specs.matrix import Cell
from toolchain.specs.resolve import resolve


def onoff(v: bool) -> str:
    return "enable" if v else "disable"


def trtllm_build_args(
    cell: Cell,
    checkpoint_dir: Path,
    output_dir: Path,
    *,
    architecture: str = "LlamaForCausalLM",
    timing_cache_in: Path | None = None,
    timing_cache_out: Path | None = None,
) -> list[str]:
    """The full `trtllm-build` argument list (program name first) for one cell."""
    r = resolve(cell, architecture)
    b = cell.spec.build
    args = [
        "trtllm-build",
        "--checkpoint_dir",
        str(checkpoint_dir),
        "--output_dir",
        str(output_dir),
        "--max_batch_size",
        str(cell.max_batch_size),
        "--max_input_len",
        str(cell.max_input_len),
        "--max_seq_len",
        str(cell.max_seq_len),
        "--max_num_tokens",
        str(r.max_num_tokens),
        "--max_beam_width",
        str(b.max_beam_width),
        "--kv_cache_type",
        r.kv_cache_type,
        "--tokens_per_block",
        str(r.tokens_per_block),
        "--gpt_attention_plugin",
        "auto",
        "--gemm_plugin",
        r.gemm_plugin,
        "--context_fmha",
        "enable",
        "--remove_input_padding",
        "enable",
        "--use_paged_context_fmha",
        onoff(r.use_paged_context_fmha),
        "--use_fp8_context_fmha",
        onoff(r.use_fp8_context_fmha),
        "--multiple_profiles",
        onoff(r.multiple_profiles),
        "--reduce_fusion",
        onoff(r.reduce_fusion),
        "--logits_dtype",
        b.logits_dtype,
        "--workers",
        str(cell.world_size),
    ]
    args += feature_args(cell)  # speculative decoding and LoRA (compile.speculative)
    if timing_cache_in is not None:
        args += ["--input_timing_cache", str(timing_cache_in)]
    if timing_cache_out is not None:
        args += ["--output_timing_cache", str(timing_cache_out)]
    problems = check_args(args[1:])
    if problems:  # a bug here, never a user mistake
        raise AssertionError(f"synthesised trtllm-build arguments are invalid: {problems}")
    return args


def expected_build_config(cell: Cell, architecture: str = "LlamaForCausalLM") -> dict[str, Any]:
    """The ``build_config`` fields of the engine's config.json that must equal what was asked."""
    r = resolve(cell, architecture)
    max_seq_len, max_num_tokens = adjusted_shape(cell, r.max_num_tokens)
    return {
        **expected_feature_config(cell),
        "max_batch_size": cell.max_batch_size,
        "max_input_len": cell.max_input_len,
        "max_seq_len": max_seq_len,
        "max_num_tokens": max_num_tokens,
        "max_beam_width": cell.spec.build.max_beam_width,
        "kv_cache_type": r.kv_cache_type.upper(),
        "plugin_config": {
            "tokens_per_block": r.tokens_per_block,
            "use_paged_context_fmha": r.use_paged_context_fmha,
            "use_fp8_context_fmha": r.use_fp8_context_fmha,
            "multiple_profiles": r.multiple_profiles,
            "reduce_fusion": r.reduce_fusion,
            "paged_kv_cache": r.kv_cache_type == "paged",
        },
    }


def build_drift(expected: dict[str, Any], engine_config: dict[str, Any]) -> list[str]:
    """Every field where the engine differs from what was asked."""
    got = engine_config.get("build_config")
    if not isinstance(got, dict):
        return ["engine config.json has no build_config"]
    out = []
    for k, v in expected.items():
        if k == "plugin_config":
            pc = got.get("plugin_config") or {}
            for pk, pv in v.items():
                if pc.get(pk) != pv:
                    out.append(f"plugin_config.{pk}: asked {pv!r}, engine has {pc.get(pk)!r}")
        elif k == "lora_config":
            lc = got.get("lora_config") or {}
            for lk, lv in v.items():
                if lc.get(lk) != lv:
                    out.append(f"lora_config.{lk}: asked {lv!r}, engine has {lc.get(lk)!r}")
        elif got.get(k) != v:
            out.append(f"{k}: asked {v!r}, engine has {got.get(k)!r}")
    return out


def convert_checkpoint_args(cell: Cell, architecture: str, hf_dir: Path, out_dir: Path, trtllm_root: Path) -> list[str]:
    """The per-model converter for an unquantized (BF16/FP16) Hugging Face checkpoint."""
    script = CONVERTERS.get(architecture)
    if script is None:
        raise CompatibilityError(
            f"no TensorRT-LLM converter is known for {architecture}", f"supported: {', '.join(CONVERTERS)}"
        )
    import sys

    return [
        sys.executable,
        str(trtllm_root / script),
        "--model_dir",
        str(hf_dir),
        "--output_dir",
        str(out_dir),
        "--dtype",
        cell.spec.model.dtype,
        "--tp_size",
        str(cell.tp),
        "--pp_size",
        str(cell.pp),
        "--workers",
        str(cell.world_size),
    ]
