"""The spec's ``speculative`` block: which speculative-decoding mode the engines are built for.

Facts (docs/speculative-and-lora.md): TensorRT-LLM 1.1.0 builds a target engine with
``--speculative_decoding_mode`` ``draft_tokens_external`` (draft-target: a second, smaller model drafts),
``medusa`` / ``eagle`` (extra heads converted into the target checkpoint) or ``lookahead_decoding``
(no extra weights; ``max_draft_len`` follows from the lookahead window ``(W, N, G)``).

This module has no import of ``toolchain.specs.models`` at import time (models.py imports it); the
helpers that need an ``EngineSpec`` import it inside the function.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from toolchain.specs.base import BUILD, PLAN, Strict
from toolchain.specs.sources import check_hf_source

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
