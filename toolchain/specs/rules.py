"""Compatibility rules checked before any GPU time is spent.

Sources: docs/trtllm-build.md ("Automatic adjustments", "What each GPU can build") (support matrix, builder.py checks,
kv-cache-reuse and gpt-attention docs, C++ backend streaming check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.specs.base import Problem
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.releases import (
    ENGINE_LINE,
    LAST_ENGINES,
    builds_engines,
    container_tags,
    llmapi_line,
    release_of,
)


def version_matches(asked: str, actual: str) -> bool:
    """``actual`` is the release ``asked`` names, compared part by part: "10.13" matches 10.13.3.9,
    "10.1" does not."""
    parts = asked.split(".")
    return actual.split(".")[: len(parts)] == parts


def _container_problem(spec: EngineSpec) -> Problem | None:
    """A Triton TensorRT-LLM container whose shipped releases differ from the spec's target versions."""
    image = spec.target.container or ""
    tag = image.rsplit(":", 1)[-1].split("-", 1)[0] if "tritonserver:" in image and "-trtllm" in image else None
    tags = container_tags()
    if tag not in tags:
        return None
    llm, trt = tags[tag]
    asked_trt = spec.target.tensorrt_version
    if spec.target.trtllm_version == llm and (asked_trt is None or trt is None or version_matches(asked_trt, trt)):
        return None
    shipped = f"TensorRT-LLM {llm}" + (f" and TensorRT {trt}" if trt else "")
    targeted = f"TensorRT-LLM {spec.target.trtllm_version}" + (f" and TensorRT {asked_trt}" if asked_trt else "")
    return Problem(
        None,
        f"{image} ships {shipped}, but the spec targets {targeted}",
        f'set target.trtllm_version: "{llm}" (and remove target.tensorrt_version), '
        "or pick the container of the release you want",
    )


def _release_problems(spec: EngineSpec) -> list[Problem]:
    """The targeted TensorRT-LLM release against the runtime and the container (docs/releases.md)."""
    out: list[Problem] = []
    version = spec.target.trtllm_version
    release = release_of(version)
    if spec.runtime == "tensorrt":
        if release is not None and not release.engines:
            out.append(
                Problem(
                    None,
                    f"TensorRT-LLM {version} has no TensorRT engine backend: trtllm-build, TensorRT engines and "
                    "the tensorrtllm Triton backend were removed in 1.3.0rc21",
                    f'use runtime: pytorch (the LLM API), or target.trtllm_version: "{LAST_ENGINES}" for engines',
                )
            )
        elif not builds_engines(version):
            out.append(
                Problem(
                    None,
                    f"TensorRT-LLM {version} is outside {ENGINE_LINE}, the releases the toolchain builds "
                    "engines with (trtllm-build and the tensorrtllm Triton backend)",
                    f'set target.trtllm_version: "{LAST_ENGINES}", or use runtime: pytorch',
                )
            )
        elif spec.target.tensorrt() is None:
            out.append(
                Problem(
                    None,
                    f"the toolchain does not know which TensorRT TensorRT-LLM {version} ships",
                    "set target.tensorrt_version (the TensorRT in that release's container)",
                )
            )
    if spec.runtime == "pytorch" and llmapi_line(version) is None:
        out.append(
            Problem(
                None,
                f"runtime pytorch needs TensorRT-LLM 1.2 or later (got {version}): the toolchain writes the "
                "LLM-API options of 1.2.x and the 1.3 line",
                f'set target.trtllm_version: "{LAST_ENGINES}" or later, or use runtime: tensorrt',
            )
        )
    container = _container_problem(spec)
    if container is not None:
        out.append(container)
    return out


def _paged_context_problems(spec: EngineSpec) -> list[Problem]:
    """KV-cache format and build options that rule out paged context (prefix caching, chunked prefill, IFB)."""
    out: list[Problem] = []
    s, b, q = spec.serving, spec.build, spec.quantization
    wants_paged_ctx = s.enable_prefix_caching or s.enable_chunked_prefill
    if q.kv_cache == "int8" and wants_paged_ctx:
        out.append(
            Problem(
                None,
                "an INT8 KV cache turns off paged context FMHA, so prefix caching and chunked prefill cannot work",
                "use quantization.kv_cache: fp8 (SM>=89) or set serving.enable_prefix_caching and "
                "serving.enable_chunked_prefill to false",
            )
        )
    if q.kv_cache == "fp8" and q.weights not in ("fp8", "w4a8_awq", "nvfp4") and wants_paged_ctx:
        out.append(
            Problem(
                None,
                f"TensorRT-LLM turns off paged context FMHA for an FP8 KV cache with {q.weights} "
                "weights (only FP8, W4A8_AWQ and NVFP4 keep it), so prefix caching and chunked "
                "prefill cannot work",
                "use quantization.kv_cache: auto, or disable serving.enable_prefix_caching and "
                "serving.enable_chunked_prefill",
            )
        )
    if b.use_paged_context_fmha is False and wants_paged_ctx:
        out.append(
            Problem(
                None,
                "prefix caching and chunked prefill need an engine built with --use_paged_context_fmha enable",
                "remove build.use_paged_context_fmha: false or disable prefix caching/chunked prefill",
            )
        )
    if b.kv_cache_type != "paged" and (wants_paged_ctx or s.batching == "inflight_fused_batching"):
        out.append(
            Problem(
                None,
                "in-flight batching, prefix caching and chunked prefill need a paged KV cache",
                "set build.kv_cache_type: paged",
            )
        )
    return out


def check_spec(spec: EngineSpec) -> list[Problem]:
    """Rules that do not depend on a matrix cell."""
    from toolchain.specs import cuda_graphs, dynamo_spec, lora_spec, speculative_spec

    out: list[Problem] = (
        speculative_spec.problems(spec)
        + lora_spec.problems(spec)
        + cuda_graphs.problems(spec)
        + dynamo_spec.problems(spec)
    )
    s, b, q = spec.serving, spec.build, spec.quantization
    out += _release_problems(spec)
    if s.streaming and not s.decoupled:
        out.append(
            Problem(
                None,
                "serving.streaming needs the decoupled transaction policy (the tensorrtllm backend "
                "rejects streaming otherwise)",
                "set serving.decoupled: true",
            )
        )
    out += _paged_context_problems(spec)
    if b.use_fp8_context_fmha and q.kv_cache != "fp8" and q.weights not in ("fp8", "w4a8_awq", "nvfp4"):
        out.append(
            Problem(
                None,
                "FP8 context FMHA needs FP8 weights/activations or an FP8 KV cache",
                "set quantization.kv_cache: fp8 or remove build.use_fp8_context_fmha",
            )
        )
    return out


def _weight_format_problem(cell: Cell) -> Problem | None:
    """The cell's weight format when its GPU cannot run it, with the reason that applies to that GPU."""
    q, gpu = cell.spec.quantization, cell.gpu
    if q.weights in gpu.precisions:
        return None
    if q.weights == "nvfp4":
        msg, fix = (
            f"NVFP4 needs SM >= 100 (Blackwell); {gpu.name} is SM {gpu.compute_capability}",
            "use fp8 or int4_awq on this GPU, or a B200/GB200",
        )
    elif gpu.sm >= 100:
        msg, fix = (
            f"{q.weights} is INT8/INT4 quantization, which TensorRT-LLM rejects on SM >= 100 "
            f"({gpu.name} is SM {gpu.compute_capability})",
            "use fp8 or nvfp4 on Blackwell",
        )
    elif q.weights in ("fp8", "w4a8_awq"):
        msg, fix = (
            f"{q.weights} needs FP8 tensor cores, SM >= 89; {gpu.name} is SM {gpu.compute_capability}",
            "use int8_sq or int4_awq on this GPU, or an Ada/Hopper GPU (L4, L40S, H100, H200)",
        )
    else:
        msg, fix = (f"{q.weights} is not supported on {gpu.name}", "choose a supported weight format")
    return Problem(cell.id, msg, fix)


def _sm_problems(cell: Cell) -> list[Problem]:
    """KV-cache formats and FP8 context FMHA the cell's GPU generation (SM) cannot run."""
    out: list[Problem] = []
    q, b, gpu, cid = cell.spec.quantization, cell.spec.build, cell.gpu, cell.id
    if q.kv_cache == "fp8" and gpu.sm < 89:
        out.append(
            Problem(
                cid,
                f"an FP8 KV cache needs SM >= 89; {gpu.name} is SM {gpu.compute_capability}",
                "use quantization.kv_cache: auto (or int8 without prefix caching)",
            )
        )
    if q.kv_cache == "int8" and gpu.sm >= 100:
        out.append(
            Problem(cid, f"an INT8 KV cache is rejected on SM >= 100 ({gpu.name})", "use quantization.kv_cache: fp8")
        )
    if b.use_fp8_context_fmha and gpu.sm < 89:
        out.append(
            Problem(
                cid,
                f"FP8 context FMHA needs SM >= 89; {gpu.name} is SM {gpu.compute_capability}",
                "remove build.use_fp8_context_fmha",
            )
        )
    return out


def _length_problems(cell: Cell) -> list[Problem]:
    """The cell's lengths and batch against each other: input vs sequence, CUDA-graph sizes, max_num_tokens."""
    out: list[Problem] = []
    b, s, cid = cell.spec.build, cell.spec.serving, cell.id
    if cell.max_input_len > cell.max_seq_len:
        out.append(
            Problem(
                cid,
                f"max_input_len {cell.max_input_len} exceeds max_seq_len {cell.max_seq_len}",
                "make every matrix.max_input_len <= the matrix.max_seq_len it is paired with",
            )
        )
    if s.cuda_graphs.batch_sizes and max(s.cuda_graphs.batch_sizes) > cell.max_batch_size:
        out.append(
            Problem(
                cid,
                f"CUDA-graph batch size {max(s.cuda_graphs.batch_sizes)} exceeds the engine max "
                f"batch {cell.max_batch_size}",
                "drop CUDA-graph batch sizes above the smallest matrix.max_batch_size",
            )
        )
    if s.enable_chunked_prefill is False and b.max_num_tokens < cell.max_input_len:
        out.append(
            Problem(
                cid,
                f"max_num_tokens {b.max_num_tokens} is below max_input_len {cell.max_input_len} "
                "without chunked prefill, so the longest prompt cannot be scheduled",
                "raise build.max_num_tokens or enable serving.enable_chunked_prefill",
            )
        )
    return out


def _awq_group_problem(cell: Cell, arch: Any) -> Problem | None:
    """The first AWQ-quantized layer whose per-rank input dimension the AWQ group size does not divide."""
    q = cell.spec.quantization
    if q.weights not in ("int4_awq", "w4a8_awq"):
        return None
    g = q.awq_group_size
    dims = {
        "q/k/v_proj, gate/up_proj (hidden_size)": arch.hidden_size,
        f"o_proj (hidden/TP{cell.tp})": arch.num_heads * arch.head_dim // cell.tp,
        f"down_proj (intermediate/TP{cell.tp})": arch.intermediate_size // cell.tp,
    }
    for layer, dim in dims.items():
        if dim % g:
            return Problem(
                cell.id,
                f"AWQ group size {g} does not divide the input dimension {dim} of {layer}",
                "use awq_group_size 64 or 32, or a smaller TP",
            )
    return None


def _shape_problems(cell: Cell, arch: Any) -> list[Problem]:
    """The model's shape against the cell's parallelism: heads and KV heads over TP, layers over PP, AWQ groups."""
    out: list[Problem] = []
    cid = cell.id
    if arch.num_heads % cell.tp:
        out.append(
            Problem(
                cid,
                f"TP {cell.tp} does not divide the {arch.num_heads} attention heads",
                f"use a TP that divides {arch.num_heads}",
            )
        )
    elif arch.num_kv_heads % cell.tp and cell.tp % arch.num_kv_heads:
        out.append(
            Problem(
                cid,
                f"TP {cell.tp} and the {arch.num_kv_heads} KV heads do not divide each other",
                "use a TP that divides the KV heads or a multiple of them",
            )
        )
    if arch.num_layers % cell.pp:
        out.append(
            Problem(
                cid,
                f"PP {cell.pp} does not divide the {arch.num_layers} layers",
                f"use a PP that divides {arch.num_layers}",
            )
        )
    awq = _awq_group_problem(cell, arch)
    if awq is not None:
        out.append(awq)
    return out


def check_cell(cell: Cell, arch: Any | None = None) -> list[Problem]:
    """Rules for one matrix cell; ``arch`` (a ModelArch) enables the shape rules."""
    from toolchain.specs import cuda_graphs, speculative_spec

    out: list[Problem] = speculative_spec.cell_problems(cell) + cuda_graphs.cell_problems(cell)
    weight_format = _weight_format_problem(cell)
    if weight_format is not None:
        out.append(weight_format)
    out += _sm_problems(cell)
    out += _length_problems(cell)
    if arch is not None:
        out += _shape_problems(cell, arch)
    return out


def all_problems(spec: EngineSpec, cells: list[Cell] | None = None) -> list[Problem]:
    """Every problem of a spec and its cells (default: all), with the shape rules when the model's
    architecture is known offline (local config.json or the catalog)."""
    from toolchain.errors import ModelConfigError
    from toolchain.specs import families
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.matrix import expand

    problems = check_spec(spec)
    family = families.spec_problem(spec)  # the model family on this runtime and weight format
    if family is not None:
        problems.insert(0, family)
    try:
        arch = arch_for_spec(spec, allow_network=False)
    except ModelConfigError:
        arch = None
    for cell in expand(spec) if cells is None else cells:
        problems.extend(check_cell(cell, arch))
        if spec.runtime == "pytorch":
            from toolchain.specs.llmapi import option_problems

            problems.extend(
                Problem(cell.id, f"TensorRT-LLM {spec.target.trtllm_version}: {p}", "see docs/llm-args-versions.md")
                for p in option_problems(cell)
            )
    return problems


def _more(problems: list[Problem]) -> str:
    """The problems after the first, each with its fix (none hidden behind a count)."""
    rest = problems[1:]
    return f" (+{len(rest)} more: {'; '.join(p.line() for p in rest)})" if rest else ""


def require_compatible(spec: EngineSpec, cells: list[Cell] | None = None) -> None:
    """Raise the first problem as a CompatibilityError (with how many more there are)."""
    from toolchain.errors import CompatibilityError

    problems = all_problems(spec, cells)
    if problems:
        raise CompatibilityError(problems[0].line().rsplit(" — ", 1)[0] + _more(problems), problems[0].fix)


def validate_spec_file(path: Path) -> tuple[EngineSpec, list[Cell]]:
    """`toolchain spec validate` for one file: parse it strictly, expand it, and apply every rule; the first
    problem is raised as a CompatibilityError that names the file (with how many more there are)."""
    from toolchain.errors import CompatibilityError
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    spec = load_spec(path)
    cells = expand(spec)
    problems = all_problems(spec, cells)
    if problems:
        first = problems[0]
        raise CompatibilityError(f"{path}: {first.message}{_more(problems)}", first.fix)
    return spec, cells
