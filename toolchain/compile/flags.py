"""The `trtllm-build` flag table of TensorRT-LLM 1.x (NVIDIA/TensorRT-LLM tensorrt_llm/commands/build.py@65f1d15,
tensorrt_llm/plugin/plugin.py@c20322f; docs/upstream-trtllm-1.1.md).

Used to check every synthesised argument list before it runs. Tests hold it against an independent
copy of the upstream argparse definitions (tests/reference/trtllm_build_argparse.json), which the
`trtllm-build` stand-in parses with; this module is not imported by any stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("auto", "float16", "float32", "bfloat16", "int32", "disable")
ONOFF = ("enable", "disable")


@dataclass(frozen=True)
class Flag:
    type: type
    choices: tuple[str, ...] | None = None
    default: object = None


FLAGS: dict[str, Flag] = {
    # general (build.py)
    "--checkpoint_dir": Flag(str),
    "--model_config": Flag(str),
    "--build_config": Flag(str),
    "--output_dir": Flag(str, default="engine_outputs"),
    "--max_batch_size": Flag(int, default=2048),
    "--max_input_len": Flag(int, default=1024),
    "--max_seq_len": Flag(int),
    "--max_beam_width": Flag(int, default=1),
    "--max_num_tokens": Flag(int, default=8192),
    "--opt_num_tokens": Flag(int),
    "--max_prompt_embedding_table_size": Flag(int, default=0),
    "--kv_cache_type": Flag(str, ("continuous", "paged", "disabled")),
    "--input_timing_cache": Flag(str),
    "--output_timing_cache": Flag(str, default="model.cache"),
    "--profiling_verbosity": Flag(str, ("layer_names_only", "detailed", "none"), "layer_names_only"),
    "--workers": Flag(int, default=1),
    "--log_level": Flag(str, ("internal_error", "error", "warning", "info", "verbose", "debug", "trace"), "info"),
    "--logits_dtype": Flag(str, ("float16", "float32")),
    "--max_draft_len": Flag(int, default=0),
    "--speculative_decoding_mode": Flag(
        str, ("draft_tokens_external", "lookahead_decoding", "medusa", "explicit_draft_tokens", "eagle")
    ),
    "--max_lora_rank": Flag(int, default=64),
    "--lora_ckpt_source": Flag(str, ("hf", "nemo"), "hf"),
    # plugins / features (plugin.py): dtype-valued
    "--bert_attention_plugin": Flag(str, DTYPES, "auto"),
    "--gpt_attention_plugin": Flag(str, DTYPES, "auto"),
    "--gemm_plugin": Flag(str, ("auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable")),
    "--gemm_swiglu_plugin": Flag(str, ("fp8", "disable"), "disable"),
    "--fp8_rowwise_gemm_plugin": Flag(str, DTYPES, "disable"),
    "--lora_plugin": Flag(str, DTYPES, "disable"),
    "--moe_plugin": Flag(str, DTYPES, "auto"),
    "--mamba_conv1d_plugin": Flag(str, DTYPES, "auto"),
    "--nccl_plugin": Flag(str, DTYPES, "auto"),
    "--low_latency_gemm_plugin": Flag(str, ("fp8", "disable"), "disable"),
    "--low_latency_gemm_swiglu_plugin": Flag(str, ("fp8", "disable"), "disable"),
    "--gemm_allreduce_plugin": Flag(str, ("float16", "bfloat16", "disable"), "disable"),
    # bool features: a value is required
    "--dora_plugin": Flag(str, ONOFF, "disable"),
    "--context_fmha": Flag(str, ONOFF, "enable"),
    "--bert_context_fmha_fp32_acc": Flag(str, ONOFF, "disable"),
    "--remove_input_padding": Flag(str, ONOFF, "enable"),
    "--tokens_per_block": Flag(int, default=32),
    "--use_paged_context_fmha": Flag(str, ONOFF, "enable"),
    "--use_fp8_context_fmha": Flag(str, ONOFF, "enable"),
    "--fuse_fp4_quant": Flag(str, ONOFF, "disable"),
    "--multiple_profiles": Flag(str, ONOFF, "disable"),
    "--paged_state": Flag(str, ONOFF, "enable"),
    "--streamingllm": Flag(str, ONOFF, "disable"),
    "--norm_quant_fusion": Flag(str, ONOFF, "disable"),
    "--reduce_fusion": Flag(str, ONOFF, "disable"),
    "--user_buffer": Flag(str, ONOFF, "disable"),
    "--use_fused_mlp": Flag(str, ONOFF, "enable"),
    "--pp_reduce_scatter": Flag(str, ONOFF, "disable"),
}
STORE_TRUE = (
    "--strip_plan",
    "--weight_sparsity",
    "--weight_streaming",
    "--fast_build",
    "--enable_debug_output",
    "--dry_run",
    "--monitor_memory",
    "--gather_context_logits",
    "--gather_generation_logits",
    "--gather_all_token_logits",
)
# nargs='+' flags (build.py LoRA group): one or more values, choices per value
LORA_MODULE_IDS = (
    "attn_qkv", "attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate",
    "cross_attn_qkv", "cross_attn_q", "cross_attn_k", "cross_attn_v", "cross_attn_dense", "moe_h_to_4h",
    "moe_4h_to_h", "moe_gate", "moe_router", "mlp_router", "mlp_gate_up",
)  # fmt: skip
NARGS: dict[str, tuple[str, ...] | None] = {"--lora_target_modules": LORA_MODULE_IDS, "--lora_dir": None}
# Removed from trtllm-build (release notes 0.11-0.12, 0.14): never emit.
REMOVED = (
    "--tp_size",
    "--pp_size",
    "--cp_size",
    "--max_output_len",
    "--strongly_typed",
    "--weight_only_precision",
    "--use_custom_all_reduce",
    "--builder_opt",
    "--use_context_fmha_for_generation",
    "--attention_qk_half_accumulation",
    "--enable_xqa",
    "--auto_parallel",
    "--gpus_per_node",
    "--cluster_key",
)


# Still parsed, but deprecated (build.py: "use --kv_cache_type"): never emit.
DEPRECATED = ("--paged_kv_cache",)


def check_args(args: list[str]) -> list[str]:
    """Problems with an argument list against the table (empty when it is valid)."""
    problems = []
    i = 0
    seen = set()
    while i < len(args):
        a = args[i]
        if a in REMOVED or a in DEPRECATED:
            problems.append(f"{a} was {'removed from' if a in REMOVED else 'deprecated in'} trtllm-build")
            i += 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        if a in STORE_TRUE:
            seen.add(a)
            i += 1
            continue
        if a in NARGS:
            values = []
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                values.append(args[i])
                i += 1
            if not values:
                problems.append(f"{a} needs at least one value")
            allowed = NARGS[a]
            problems += [
                f"{a} {v!r} is not one of {', '.join(allowed)}" for v in values if allowed and v not in allowed
            ]
            continue
        flag = FLAGS.get(a)
        if flag is None:
            problems.append(f"unknown flag {a}")
            i += 1
            continue
        if a in seen:
            problems.append(f"{a} given twice")
        seen.add(a)
        if i + 1 >= len(args) or args[i + 1].startswith("--"):
            problems.append(f"{a} needs a value")
            i += 1
            continue
        v = args[i + 1]
        if flag.type is int:
            try:
                int(v)
            except ValueError:
                problems.append(f"{a} takes an integer, got {v!r}")
        if flag.choices and v not in flag.choices:
            problems.append(f"{a} {v!r} is not one of {', '.join(flag.choices)}")
        i += 2
    if "--multiple_profiles" in seen and "--opt_num_tokens" in seen:
        idx = args.index("--multiple_profiles")
        if args[idx + 1] == "enable":
            problems.append("--opt_num_tokens cannot be combined with --multiple_profiles enable")
    return problems
