"""LLM-API options (``extra_llm_api_options`` YAML) for the PyTorch runtime, TensorRT-LLM 1.2.x and 1.3.

Field names and rules: docs/llmapi.md; what each release line accepts: docs/llm-args-versions.md. Every
key we write is checked against the target line's argument model below (TensorRT-LLM rejects unknown
keys at every level).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import CompatibilityError
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.releases import llmapi_line
from toolchain.specs.speculative import LLMAPI_DECODING_TYPE

# The keys the toolchain may write, per LLM-API argument model (``toolchain.specs.releases.llmapi_line``):
# a strict subset of upstream's, whose models forbid unknown keys at every level. Sources and the
# differences between the lines: docs/llm-args-versions.md (tensorrt_llm/llmapi/llm_args.py of each).
TOP_12 = {
    "max_batch_size",
    "max_num_tokens",
    "max_seq_len",
    "max_beam_width",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "enable_chunked_prefill",
    "kv_cache_config",
    "cuda_graph_config",
    "scheduler_config",
    "backend",
    "return_perf_metrics",
    "enable_iter_perf_stats",
    "model",
    "speculative_config",
    "lora_config",
    "cache_transceiver_config",
    "disable_overlap_scheduler",
}
KV_12 = {
    "enable_block_reuse",
    "max_tokens",
    "free_gpu_memory_fraction",
    "tokens_per_block",
    "dtype",
    "enable_partial_reuse",
    "host_cache_size",
}
SCHED_12 = {"capacity_scheduler_policy", "context_chunking_policy"}
SPECULATIVE = {"decoding_type", "max_draft_len", "speculative_model"}
LORA = {"lora_dir", "max_lora_rank", "lora_target_modules", "max_loras", "max_cpu_loras"}


@dataclass(frozen=True)
class ArgModel:
    """What one LLM-API line accepts of the keys the toolchain writes, and what it refuses with a reason."""

    line: str
    top: frozenset[str]
    kv: frozenset[str]
    kv_dtypes: frozenset[str]
    cuda_graph: frozenset[str]
    cuda_graph_modes: frozenset[str]  # the union's discriminator values (1.3); empty: no ``mode`` key
    scheduler: frozenset[str]
    removed: dict[str, str]  # top-level key -> why the line refuses it


LEGACY_12 = {
    "pytorch_backend_config": "folded into the top-level LLM arguments in 1.0",
    "use_cuda_graph": "replaced by cuda_graph_config",
    "cuda_graph_batch_sizes": "replaced by cuda_graph_config.batch_sizes",
    "cuda_graph_max_batch_size": "replaced by cuda_graph_config.max_batch_size",
    "cuda_graph_padding_enabled": "replaced by cuda_graph_config.enable_padding",
    "enable_overlap_scheduler": "replaced by disable_overlap_scheduler",
    "kv_cache_dtype": "replaced by kv_cache_config.dtype",
    "enable_chunked_context": "replaced by enable_chunked_prefill",
    "quant_config": "the PyTorch runtime reads quantization from the checkpoint",
    "build_config": "a TensorRT-backend (engine) option",
    "calib_config": "a TensorRT-backend (engine) option",
}
ARG_MODELS = {
    "1.2": ArgModel(
        "1.2",
        frozenset(TOP_12),
        frozenset(KV_12),
        frozenset({"auto", "fp8"}),
        frozenset({"batch_sizes", "max_batch_size", "enable_padding"}),
        frozenset(),
        frozenset(SCHED_12),
        LEGACY_12,
    ),
    "1.3": ArgModel(
        "1.3",
        frozenset(TOP_12),
        frozenset(KV_12),
        frozenset({"auto", "fp8", "fp8_ds_mla", "nvfp4"}),
        frozenset({"batch_sizes", "max_batch_size", "enable_padding", "mode"}),
        frozenset({"decode", "encode"}),
        frozenset(SCHED_12 | {"waiting_queue_policy", "enable_prefix_aware_scheduling"}),
        LEGACY_12
        | {
            "sampler_type": "removed in the 1.3 line",
            "build_config": "removed with the TensorRT backend in 1.3.0rc21 (no BuildConfig)",
        },
    ),
}


def arg_model_json(model: ArgModel, version: str) -> dict[str, Any]:
    """The argument model as data, for the CPU stand-in to refuse what the release refuses."""
    return {
        "version": version,
        "line": model.line,
        "top": sorted(model.top),
        "removed": dict(sorted(model.removed.items())),
        "nested": {
            "kv_cache_config": sorted(model.kv),
            "cuda_graph_config": sorted(model.cuda_graph),
            "scheduler_config": sorted(model.scheduler),
            "speculative_config": sorted(SPECULATIVE),
            "lora_config": sorted(LORA),
        },
    }


TOP = TOP_12  # the 1.2 names, kept for callers that list what the toolchain writes
LEGACY = set(LEGACY_12)


def arg_model(spec: EngineSpec) -> ArgModel:
    """The argument model of the spec's target release (the newest known for a later release)."""
    line = llmapi_line(spec.target.trtllm_version)
    if line is None:
        raise CompatibilityError(
            f"TensorRT-LLM {spec.target.trtllm_version} has no LLM-API options the toolchain writes",
            "target 1.2.x or the 1.3 line for runtime: pytorch",
        )
    return ARG_MODELS[line]


def llmapi_options(cell: Cell, *, draft_dir: str | None = None) -> dict[str, Any]:
    """The options the cell's runtime is started with, checked against its release line's argument model."""
    opts = _options(cell, draft_dir=draft_dir)
    problems = validate_options(opts, arg_model(cell.spec))
    if problems:
        raise AssertionError(f"generated LLM-API options are invalid: {problems}")
    return opts


def option_problems(cell: Cell) -> list[str]:
    """What the cell's target release refuses of the options the toolchain would write (``spec validate``)."""
    line = llmapi_line(cell.spec.target.trtllm_version)
    if line is None:
        return []  # the release rules say why
    try:
        return validate_options(_options(cell), ARG_MODELS[line])
    except CompatibilityError:
        return []  # the speculative rules say why


def _options(cell: Cell, *, draft_dir: str | None = None) -> dict[str, Any]:
    spec = cell.spec
    s, b = spec.serving, spec.build
    kv: dict[str, Any] = {
        "enable_block_reuse": s.enable_prefix_caching,
        "free_gpu_memory_fraction": s.kv_cache_free_gpu_mem_fraction,
        "tokens_per_block": b.tokens_per_block,
        "dtype": "auto",  # FP8 KV comes from the checkpoint's kv_cache_quant_algo
    }
    if s.max_tokens_in_paged_kv_cache is not None:
        kv["max_tokens"] = s.max_tokens_in_paged_kv_cache
    opts: dict[str, Any] = {
        "backend": "pytorch",
        "max_batch_size": cell.max_batch_size,
        "max_num_tokens": min(b.max_num_tokens, cell.max_seq_len * cell.max_batch_size),
        "max_seq_len": cell.max_seq_len,
        "max_beam_width": b.max_beam_width,
        "tensor_parallel_size": cell.tp,
        "pipeline_parallel_size": cell.pp,
        "enable_chunked_prefill": s.enable_chunked_prefill,
        "kv_cache_config": kv,
        "scheduler_config": {"capacity_scheduler_policy": s.scheduler_policy.upper()},
        "return_perf_metrics": True,
    }
    cg = s.cuda_graphs
    if not cg.enabled:
        opts["cuda_graph_config"] = None
    else:
        sizes = sorted(cg.batch_sizes) if cg.batch_sizes else None
        g: dict[str, Any] = {
            "enable_padding": cg.padding,
            "max_batch_size": max(sizes) if sizes else cell.max_batch_size,
        }
        if sizes:
            g["batch_sizes"] = sizes
        opts["cuda_graph_config"] = g
    opts.update(llmapi_feature_options(cell, draft_dir=draft_dir))
    return opts


def validate_options(opts: dict[str, Any], model: ArgModel | None = None) -> list[str]:
    """Problems with an options dict against one line's argument model (default: 1.2), strictly checked."""
    m = model or ARG_MODELS["1.2"]
    out = []
    for k in opts:
        if k in m.removed:
            out.append(f"{k} is refused by TensorRT-LLM {m.line}: {m.removed[k]}")
        elif k not in m.top:
            out.append(f"unknown top-level key {k}")
    for k in opts.get("kv_cache_config") or {}:
        if k not in m.kv:
            out.append(f"unknown kv_cache_config key {k}")
    kv_dtype = (opts.get("kv_cache_config") or {}).get("dtype")
    if kv_dtype is not None and kv_dtype not in m.kv_dtypes:
        accepted = ", ".join(sorted(m.kv_dtypes))
        out.append(f"kv_cache_config.dtype {kv_dtype} is not accepted by TensorRT-LLM {m.line} ({accepted})")
    cg = opts.get("cuda_graph_config")
    if cg:
        for k in cg:
            if k not in m.cuda_graph:
                out.append(f"unknown cuda_graph_config key {k}")
        if "mode" in cg and cg["mode"] not in m.cuda_graph_modes:
            out.append(f"cuda_graph_config.mode {cg['mode']} is not one of {sorted(m.cuda_graph_modes)}")
        if cg.get("batch_sizes") and cg.get("max_batch_size") not in (0, max(cg["batch_sizes"])):
            out.append("cuda_graph_config.max_batch_size must equal max(batch_sizes)")
    for name, allowed in (("speculative_config", SPECULATIVE), ("lora_config", LORA)):
        for k in opts.get(name) or {}:
            if k not in allowed:
                out.append(f"unknown {name} key {k}")
    sc = opts.get("scheduler_config") or {}
    for k in sc:
        if k not in m.scheduler:
            out.append(f"unknown scheduler_config key {k}")
    if sc.get("capacity_scheduler_policy") not in (None, "MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"):
        out.append(f"bad capacity_scheduler_policy {sc.get('capacity_scheduler_policy')}")
    kvc = opts.get("kv_cache_config") or {}
    f = kvc.get("free_gpu_memory_fraction")
    if f is not None and not 0 <= f <= 1:
        out.append("kv_cache_config.free_gpu_memory_fraction must be in [0, 1]")
    tpb = kvc.get("tokens_per_block")
    if tpb is not None and (tpb < 2 or tpb & (tpb - 1)):
        out.append("kv_cache_config.tokens_per_block must be a power of two")
    return out


DRAFT_REL = "draft"  # where an artifact or repository carries the draft (or EAGLE-3) checkpoint


def bundled_models(spec: EngineSpec) -> dict[str, str]:
    """The draft (or EAGLE-3) checkpoint and LoRA adapters an LLM-API artifact or Triton repository carries
    with it, as {directory relative to the options file: source}.

    A source is a local directory (made absolute against the spec file) or ``hf://org/name[@rev]``. Every
    one is carried: the LLM API has no revision field for these, and its LoRA loader reads
    ``adapter_config.json`` from a local directory, so a Hub source is downloaded (at its revision, else
    the default branch) where the artifact or repository is made, never where it is served."""
    out: dict[str, str] = {}
    sd = spec.speculative
    if sd is not None and sd.mode in LLMAPI_DECODING_TYPE:
        source = sd.draft.source if sd.draft else sd.heads.source if sd.heads else ""
        if source:
            out[DRAFT_REL] = _absolute(spec, source)
    if spec.lora is not None:
        for i, a in enumerate(spec.lora.adapters):
            out[_adapter_rel(i, a)] = _absolute(spec, a)
    return out


def carried_field(rel: str) -> str:
    """The spec field a carried directory comes from (for messages): ``draft`` or ``lora/<i>-<name>``."""
    if rel == DRAFT_REL:
        return "speculative.draft.source"
    return f"lora.adapters[{rel.removeprefix('lora/').split('-', 1)[0]}]"


def llmapi_feature_options(cell: Cell, *, draft_dir: str | None = None) -> dict[str, Any]:
    """``speculative_config`` / ``lora_config`` for ``extra_llm_api_options`` (PyTorch runtime).

    Carried models (``bundled_models``) are named relative to the options file, where the artifact or
    repository holds them; ``draft_dir`` names the draft checkpoint instead when given."""
    spec = cell.spec
    opts: dict[str, Any] = {}
    sd = spec.speculative
    if sd is not None:
        kind = LLMAPI_DECODING_TYPE.get(sd.mode)
        if kind is None:
            raise CompatibilityError(
                f"speculative mode {sd.mode} is not available on the PyTorch runtime", "use runtime: tensorrt"
            )
        model = draft_dir or DRAFT_REL
        opts["speculative_config"] = {"decoding_type": kind, "max_draft_len": sd.draft_len, "speculative_model": model}
    lo = spec.lora
    if lo is not None:
        lc: dict[str, Any] = {
            "lora_dir": [_adapter_rel(i, a) for i, a in enumerate(lo.adapters)],
            "max_lora_rank": lo.max_rank,
            "lora_target_modules": list(lo.target_modules),
        }
        if lo.max_loras is not None:
            lc["max_loras"] = lo.max_loras
        opts["lora_config"] = lc
    return opts


def _adapter_rel(i: int, source: str) -> str:
    name = source.removeprefix("hf://").split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "adapter"
    return f"lora/{i}-{name}"


def _absolute(spec: EngineSpec, source: str) -> str:
    if source.startswith("hf://"):
        return source
    p = Path(source).expanduser()
    return str(p if p.is_absolute() else (spec.base_dir / p).resolve())
