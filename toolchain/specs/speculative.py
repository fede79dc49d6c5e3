"""The spec's ``speculative`` block: which speculative-decoding mode the engines are built for.

Facts (docs/speculative-and-lora.md): TensorRT-LLM 1.1.0 builds a target engine with
``--speculative_decoding_mode`` ``draft_tokens_external`` (draft-target: a second, smaller model drafts),
``medusa`` / ``eagle`` (extra heads converted into the target checkpoint) or ``lookahead_decoding``
(no extra weights; ``max_draft_len`` follows from the lookahead window ``(W, N, G)``).

This module has no import of ``toolchain.specs.models`` at import time (models.py imports it); the
helpers that need an ``EngineSpec`` import it inside the function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from toolchain.specs.base import BUILD, PLAN, Problem, Strict
from toolchain.specs.sources import check_hf_source

if TYPE_CHECKING:
    from toolchain.specs.matrix import Cell
    from toolchain.specs.models import EngineSpec


SpecMode = Literal["draft_target", "medusa", "eagle", "lookahead"]
# --speculative_decoding_mode value per mode (build.py choices)
BUILD_MODE: dict[str, str] = {
    "draft_target": "draft_tokens_external",
    "medusa": "medusa",
    "eagle": "eagle",
    "lookahead": "lookahead_decoding",
}
# Precisions each mode's support matrix lists (the examples' READMEs).
MODE_PRECISIONS: dict[str, tuple[str, ...]] = {
    "draft_target": ("bf16", "fp16", "fp8"),
    "medusa": ("bf16", "fp16"),
    "eagle": ("bf16", "fp16"),
    "lookahead": ("bf16", "fp16", "fp8"),
}
MIN_SM = 80  # every mode: "GPU Compute Capability >= 8.0"
HEADS_DEFAULT_DRAFT_LEN = 63  # --max_draft_len of the Medusa / EAGLE examples
EAGLE_MAX_DRAFT_LEN = 256  # builder.py
EAGLE_MAX_BATCH = 512  # builder.py
# trtllm-serve decoding_type for the PyTorch runtime; Medusa and Lookahead are TensorRT-only.
LLMAPI_DECODING_TYPE: dict[str, str] = {"draft_target": "Draft_Target", "eagle": "Eagle3"}


def _check_source(v: str) -> str:
    if not v.strip():
        raise ValueError("source is empty; give a local directory or hf://org/name@revision")
    if "://" in v and not v.startswith("hf://"):
        raise ValueError(f"unsupported scheme in '{v}'; use a local directory or hf://org/name@revision")
    check_hf_source(v)
    return v


class DraftModel(Strict):
    source: str = Field(
        description="Draft model checkpoint (draft_target): a local directory (relative to the spec) or "
        "hf://org/name@revision; same tokenizer as the target",
        json_schema_extra=BUILD,
    )
    weights: Literal["bf16", "fp16", "fp8"] = Field(
        "bf16", description="Draft weight format (draft-target supports FP16/BF16/FP8)", json_schema_extra=BUILD
    )
    kv_cache: Literal["auto", "fp8"] = Field("auto", description="Draft KV-cache dtype", json_schema_extra=BUILD)
    architecture: str | None = Field(
        None, description="Draft model's name in the planner's offline architecture catalog", json_schema_extra=PLAN
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _check_source(v)


class Heads(Strict):
    source: str = Field(
        description="Medusa heads or EAGLE draft-network checkpoint (local directory or hf://org/name@revision); "
        "converted together with the base model",
        json_schema_extra=BUILD,
    )
    count: int = Field(
        4,
        ge=1,
        description="Medusa heads (--num_medusa_heads) or EAGLE layers (--num_eagle_layers)",
        json_schema_extra=BUILD,
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _check_source(v)


class Lookahead(Strict):
    """The server's lookahead configuration (W, N, G); (2, 2, 1) is the smallest that speculates."""

    window_size: int = Field(7, ge=2, description="Lookahead window W", json_schema_extra=BUILD)
    ngram_size: int = Field(7, ge=2, description="N-gram size N", json_schema_extra=BUILD)
    verification_set_size: int = Field(7, ge=1, description="Verification set size G", json_schema_extra=BUILD)


def lookahead_draft_len(w: int, n: int, g: int) -> int:
    """``max_draft_len`` an engine needs for a lookahead server configuration (W, N, G)."""
    return (0 if n == 1 else n - 2) + (w - 1 + g) * (n - 1)


class SpeculativeDecoding(Strict):
    mode: SpecMode = Field(description="draft_target, medusa, eagle or lookahead", json_schema_extra=BUILD)
    max_draft_len: int | None = Field(
        None,
        ge=1,
        description="Draft tokens per step (trtllm-build --max_draft_len). Required for draft_target; "
        "63 for medusa/eagle; derived from the window for lookahead",
        json_schema_extra=BUILD,
    )
    draft: DraftModel | None = None
    heads: Heads | None = None
    lookahead: Lookahead | None = None

    @model_validator(mode="after")
    def _per_mode(self) -> SpeculativeDecoding:
        m = self.mode
        blocks = {"draft": self.draft, "heads": self.heads, "lookahead": self.lookahead}
        needs = {"draft_target": "draft", "medusa": "heads", "eagle": "heads", "lookahead": None}[m]
        for name, value in blocks.items():
            if value is not None and name != needs and not (m == "lookahead" and name == "lookahead"):
                raise ValueError(f"speculative.{name} does not apply to mode {m}")
        if needs is not None and blocks[needs] is None:
            raise ValueError(f"mode {m} needs speculative.{needs}")
        if m == "draft_target" and self.max_draft_len is None:
            raise ValueError("mode draft_target needs max_draft_len (tokens the draft proposes per step)")
        if m == "lookahead" and self.max_draft_len is not None:
            la = self.lookahead or Lookahead()
            want = lookahead_draft_len(la.window_size, la.ngram_size, la.verification_set_size)
            if self.max_draft_len != want:
                raise ValueError(
                    f"lookahead ({la.window_size}, {la.ngram_size}, {la.verification_set_size}) needs "
                    f"max_draft_len {want}, not {self.max_draft_len}; omit max_draft_len to derive it"
                )
        if m == "eagle" and self.draft_len > EAGLE_MAX_DRAFT_LEN:
            raise ValueError(f"EAGLE allows max_draft_len <= {EAGLE_MAX_DRAFT_LEN}, got {self.draft_len}")
        return self

    @property
    def draft_len(self) -> int:
        """The engine's max_draft_len."""
        if self.max_draft_len is not None:
            return self.max_draft_len
        if self.mode == "lookahead":
            la = self.lookahead or Lookahead()
            return lookahead_draft_len(la.window_size, la.ngram_size, la.verification_set_size)
        return HEADS_DEFAULT_DRAFT_LEN

    @property
    def lookahead_config(self) -> Lookahead:
        return self.lookahead or Lookahead()

    @property
    def build_mode(self) -> str:
        return BUILD_MODE[self.mode]


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
