"""LLM-API options (``extra_llm_api_options`` YAML) for the PyTorch runtime, TensorRT-LLM 1.2.

Field names and rules: docs/llmapi.md. Every key we write is
checked against the allowed sets below (TensorRT-LLM rejects unknown keys at every level).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.errors import CompatibilityError
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.speculative import LLMAPI_DECODING_TYPE

TOP = {
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
}
SPECULATIVE = {"decoding_type", "max_draft_len", "speculative_model"}
LORA = {"lora_dir", "max_lora_rank", "lora_target_modules", "max_loras", "max_cpu_loras"}
KV = {
    "enable_block_reuse",
    "max_tokens",
    "free_gpu_memory_fraction",
    "tokens_per_block",
    "dtype",
    "enable_partial_reuse",
    "host_cache_size",
}
CUDA_GRAPH = {"batch_sizes", "max_batch_size", "enable_padding"}
SCHED = {"capacity_scheduler_policy", "context_chunking_policy"}
LEGACY = {
    "pytorch_backend_config",
    "use_cuda_graph",
    "cuda_graph_batch_sizes",
    "cuda_graph_max_batch_size",
    "cuda_graph_padding_enabled",
    "enable_overlap_scheduler",
    "kv_cache_dtype",
    "enable_chunked_context",
    "quant_config",
    "build_config",
    "calib_config",
}


def llmapi_options(cell: Cell, *, draft_dir: str | None = None) -> dict[str, Any]:
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
    problems = validate_options(opts)
    if problems:
        raise AssertionError(f"generated LLM-API options are invalid: {problems}")
    return opts


def validate_options(opts: dict[str, Any]) -> list[str]:
    """Problems with an options dict against the 1.2 schema (a subset we emit, strictly checked)."""
    out = []
    for k in opts:
        if k in LEGACY:
            out.append(f"{k} is a legacy or TensorRT-backend-only key")
        elif k not in TOP:
            out.append(f"unknown top-level key {k}")
    for k in opts.get("kv_cache_config") or {}:
        if k not in KV:
            out.append(f"unknown kv_cache_config key {k}")
    cg = opts.get("cuda_graph_config")
    if cg:
        for k in cg:
            if k not in CUDA_GRAPH:
                out.append(f"unknown cuda_graph_config key {k}")
        if cg.get("batch_sizes") and cg.get("max_batch_size") not in (0, max(cg["batch_sizes"])):
            out.append("cuda_graph_config.max_batch_size must equal max(batch_sizes)")
    for name, allowed in (("speculative_config", SPECULATIVE), ("lora_config", LORA)):
        for k in opts.get(name) or {}:
            if k not in allowed:
                out.append(f"unknown {name} key {k}")
    sc = opts.get("scheduler_config") or {}
    for k in sc:
        if k not in SCHED:
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
