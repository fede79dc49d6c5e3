"""The spec's ``lora`` block: multi-LoRA serving on one base engine.

Facts (docs/speculative-and-lora.md §1, §4, §5): the engine is built with ``--lora_plugin`` (the model
dtype), ``--lora_target_modules`` (ids of ``LoraManager.LORA_MODULE_IDS``) and ``--max_lora_rank``; those
change the engine bytes. Adapters themselves are served at run time (Triton ``lora_task_id`` /
``lora_weights`` / ``lora_config`` inputs, or the LLM API's ``lora_config``) and live in an adapter
cache sized by the ``lora_cache_*`` parameters, so they are runtime fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from toolchain.specs.base import BUILD, RUNTIME, Strict
from toolchain.specs.sources import check_hf_source

# LoraManager.LORA_MODULE_IDS (tensorrt_llm/lora_manager.py, 1.x): name -> module id
LoraModule = Literal[
    "attn_qkv",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_dense",
    "mlp_h_to_4h",
    "mlp_4h_to_h",
    "mlp_gate",
    "cross_attn_qkv",
    "cross_attn_q",
    "cross_attn_k",
    "cross_attn_v",
    "cross_attn_dense",
    "moe_h_to_4h",
    "moe_4h_to_h",
    "moe_gate",
    "moe_router",
    "mlp_router",
    "mlp_gate_up",
]
DEFAULT_MODULES: tuple[LoraModule, ...] = (
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_dense",
    "mlp_h_to_4h",
    "mlp_4h_to_h",
    "mlp_gate",
)


class LoraCache(Strict):
    optimal_adapter_size: int = Field(
        8,
        ge=1,
        description="Triton lora_cache_optimal_adapter_size (rank that fills one cache page)",
        json_schema_extra=RUNTIME,
    )
    max_adapter_size: int = Field(
        64,
        ge=1,
        description="Triton lora_cache_max_adapter_size (largest rank a page row holds)",
        json_schema_extra=RUNTIME,
    )
    gpu_memory_fraction: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Triton lora_cache_gpu_memory_fraction: of the memory left after the engine and KV cache",
        json_schema_extra=RUNTIME,
    )
    host_memory_bytes: int = Field(
        1 << 30, ge=0, description="Triton lora_cache_host_memory_bytes (host adapter cache)", json_schema_extra=RUNTIME
    )

    @model_validator(mode="after")
    def _sizes(self) -> LoraCache:
        if self.optimal_adapter_size > self.max_adapter_size:
            raise ValueError(
                f"optimal_adapter_size {self.optimal_adapter_size} exceeds max_adapter_size {self.max_adapter_size}"
            )
        return self


class LoraServing(Strict):
    max_rank: int = Field(
        64, ge=1, description="trtllm-build --max_lora_rank (largest adapter rank served)", json_schema_extra=BUILD
    )
    target_modules: list[LoraModule] = Field(
        default_factory=lambda: list(DEFAULT_MODULES),
        min_length=1,
        description="trtllm-build --lora_target_modules: TensorRT-LLM module names adapters may touch",
        json_schema_extra=BUILD,
    )
    adapters: list[str] = Field(
        default_factory=list,
        description="Adapters to serve: Hugging Face PEFT directories (relative to the spec) or "
        "hf://org/name@revision; adapter i is lora_task_id i + 1",
        json_schema_extra=RUNTIME,
    )
    max_loras: int | None = Field(
        None, ge=1, description="PyTorch runtime: adapters resident on the GPU at once", json_schema_extra=RUNTIME
    )
    cache: LoraCache = Field(default_factory=LoraCache)

    @field_validator("target_modules")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("target modules must not repeat")
        return v

    @field_validator("adapters")
    @classmethod
    def _adapters(cls, v: list[str]) -> list[str]:
        for a in v:
            if not a.strip():
                raise ValueError("an adapter source is empty")
            if "://" in a and not a.startswith("hf://"):
                raise ValueError(f"unsupported scheme in '{a}'; use a local directory or hf://org/name@revision")
            check_hf_source(a)
        if len(set(v)) != len(v):
            raise ValueError("adapters must not repeat")
        return v
