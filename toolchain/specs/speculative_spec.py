"""The ``speculative`` block read against the whole spec and its cells: the engine's lengths, the draft model as a
spec of its own, and the rules that need the spec or the cell.

Kept apart from toolchain/specs/speculative.py (the block's model, which models.py imports) so that no module
of the package needs the other's types both ways.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.specs.base import Problem
from toolchain.specs.speculative import (
    EAGLE_MAX_BATCH,
    LLMAPI_DECODING_TYPE,
    MIN_SM,
    MODE_PRECISIONS,
    SpeculativeDecoding,
)

if TYPE_CHECKING:
    from toolchain.specs.matrix import Cell
    from toolchain.specs.models import EngineSpec


def engine_max_seq_len(cell: Cell) -> int:
    """``max_seq_len`` the engine records: TensorRT-LLM adds ``max_draft_len`` for every speculative mode
    and, for EAGLE, its layer count (builder.py)."""
    sd = cell.spec.speculative
    if sd is None:
        return cell.max_seq_len
    extra = sd.heads.count if sd.mode == "eagle" and sd.heads is not None else 0
    return cell.max_seq_len + sd.draft_len + extra


def draft_spec(spec: EngineSpec) -> EngineSpec:
    """The draft model of a draft-target spec as a spec of its own: same target, matrix, build and
    serving options, the draft checkpoint and its quantization. Its cells key, build and publish the
    draft engine exactly like any engine, so the registry holds it under its own key."""
    sd = spec.speculative
    if sd is None or sd.draft is None:
        raise ValueError(f"spec {spec.name} has no draft model")
    d = sd.draft
    out = spec.model_copy(
        update={
            "name": f"{spec.name}-draft",
            # the spec's own model classes, built (and validated) anew: no import of models, which imports this
            "model": type(spec.model)(source=d.source, dtype=spec.model.dtype, architecture=d.architecture),
            "quantization": type(spec.quantization)(
                weights=d.weights,
                kv_cache=d.kv_cache,
                calibration=spec.quantization.calibration,
                accuracy=spec.quantization.accuracy,
            ),
            "speculative": None,
            "lora": None,
        }
    )
    return out.with_base_dir(spec.base_dir)


def draft_cell(cell: Cell) -> Cell:
    """The draft engine's cell for a draft-target cell (same GPU, shape and parallelism)."""
    from dataclasses import replace

    return replace(cell, spec=draft_spec(cell.spec))


def _mode_support_problems(spec: EngineSpec, sd: SpeculativeDecoding) -> list[Problem]:
    """The mode against the runtime, the weight format and the KV-cache format its support matrix lists."""

    out: list[Problem] = []
    m, q = sd.mode, spec.quantization
    if spec.runtime == "pytorch" and m not in LLMAPI_DECODING_TYPE:
        out.append(
            Problem(
                None,
                f"speculative mode {m} is TensorRT-engine only; the LLM API raises 'does not support backend' "
                "for Medusa and Lookahead on PyTorch",
                "use runtime: tensorrt, or mode draft_target / eagle (an EAGLE-3 draft) on pytorch",
            )
        )
    if q.weights not in MODE_PRECISIONS[m]:
        out.append(
            Problem(
                None,
                f"speculative mode {m} supports {', '.join(MODE_PRECISIONS[m])} weights, not {q.weights}",
                f"set quantization.weights to one of {', '.join(MODE_PRECISIONS[m])}, or drop speculative",
            )
        )
    if m in ("medusa", "eagle") and q.kv_cache != "auto":
        out.append(
            Problem(
                None,
                f"{m} supports FP16/BF16 only (its support matrix lists no quantized KV cache)",
                "set quantization.kv_cache: auto",
            )
        )
    return out


def _engine_problems(spec: EngineSpec, m: str) -> list[Problem]:
    """What a TensorRT engine built for mode ``m`` needs: paged KV cache, paged context FMHA, no streaming."""

    out: list[Problem] = []
    if spec.runtime != "tensorrt":
        return out
    if spec.build.kv_cache_type != "paged":
        out.append(Problem(None, f"speculative mode {m} needs a paged KV cache", "set build.kv_cache_type: paged"))
    if m in ("draft_target", "eagle") and spec.build.use_paged_context_fmha is False:
        out.append(
            Problem(
                None,
                f"{m} engines are built with --use_paged_context_fmha enable (draft-target reuses the KV "
                "cache between steps; EAGLE turns it on)",
                "remove build.use_paged_context_fmha: false",
            )
        )
    if m == "draft_target":
        out += _draft_target_serving_problems(spec)
    if m == "draft_target" and spec.serving.streaming:
        out.append(
            Problem(
                None,
                "draft-target runs through the BLS model, which rejects streaming requests with num_draft_tokens",
                "set serving.streaming: false",
            )
        )
    return out


def _draft_target_serving_problems(spec: EngineSpec) -> list[Problem]:
    """Serving values draft-target cannot honour (the repository would have to say otherwise), refused."""

    s = spec.serving
    out: list[Problem] = []
    if not s.enable_prefix_caching:
        out.append(
            Problem(
                None,
                "draft-target needs KV-cache block reuse on the target model (TensorRT-LLM refuses to start "
                "otherwise: 'KV cache block reuse must be enabled for speculative decoding target model')",
                "remove serving.enable_prefix_caching: false",
            )
        )
    if not s.exclude_input_in_output:
        out.append(
            Problem(
                None,
                "draft-target answers through the BLS model with the generated tokens only (the draft and "
                "target models run with exclude_input_in_output true, as upstream's recipe sets them)",
                "remove serving.exclude_input_in_output: false",
            )
        )
    if s.decoupled:
        out.append(
            Problem(
                None,
                "draft-target's BLS model calls the target and draft models one step at a time, so none of "
                "the three can be decoupled",
                "set serving.decoupled: false (and serving.streaming: false)",
            )
        )
    return out


def _eagle_engine_problems(spec: EngineSpec) -> list[Problem]:
    """Features an EAGLE TensorRT engine does not support: pipeline parallelism, chunked context, CUDA graphs."""

    out: list[Problem] = []
    if spec.parallelism.pp > 1:
        out.append(Problem(None, "EAGLE does not support pipeline parallelism", "set parallelism.pp: 1"))
    if spec.serving.enable_chunked_prefill:
        out.append(Problem(None, "EAGLE does not support chunked context", "set serving.enable_chunked_prefill: false"))
    if spec.serving.cuda_graphs.enabled:
        out.append(Problem(None, "EAGLE does not support CUDA graphs", "set serving.cuda_graphs.enabled: false"))
    return out


def problems(spec: EngineSpec) -> list[Problem]:
    """Mode vs runtime, precision and serving rules that need the whole spec."""
    sd = spec.speculative
    if sd is None:
        return []
    out = _mode_support_problems(spec, sd) + _engine_problems(spec, sd.mode)
    if spec.runtime == "tensorrt" and sd.mode == "eagle":
        out += _eagle_engine_problems(spec)
    return out


def cell_problems(cell: Cell) -> list[Problem]:

    sd = cell.spec.speculative
    if sd is None:
        return []
    out: list[Problem] = []
    gpu = cell.gpu
    if gpu.sm < MIN_SM:
        out.append(
            Problem(
                cell.id,
                f"speculative decoding needs SM >= 80; {gpu.name} is SM {gpu.compute_capability}",
                "use an Ampere or newer GPU",
            )
        )
    if sd.draft is not None and sd.draft.weights == "fp8" and "fp8" not in gpu.precisions:
        out.append(
            Problem(
                cell.id,
                f"an FP8 draft needs SM >= 89; {gpu.name} is SM {gpu.compute_capability}",
                "set speculative.draft.weights: bf16",
            )
        )
    if sd.mode == "eagle" and cell.max_batch_size > EAGLE_MAX_BATCH:
        out.append(
            Problem(
                cell.id,
                f"EAGLE engines allow max_batch_size <= {EAGLE_MAX_BATCH}, got {cell.max_batch_size}",
                f"use matrix.max_batch_size values <= {EAGLE_MAX_BATCH}",
            )
        )
    return out
