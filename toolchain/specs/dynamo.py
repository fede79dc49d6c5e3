"""The spec's ``dynamo`` block: serve the ``pytorch`` runtime on NVIDIA Dynamo, aggregated or with prefill
and decode on separate worker pools.

Facts (docs/dynamo.md): ``dynamo.trtllm`` runs TensorRT-LLM's LLM API on the PyTorch backend only (its
``engine.py`` knows one backend, ``pytorch``, and rejects any other), so prebuilt TensorRT engines cannot be
served on it; ai-dynamo 1.6.1's ``trtllm`` extra pins ``tensorrt-llm==1.3.0rc29``, and its own DGD templates
run ``nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1``. KV moves between pools through TensorRT-LLM's
cache transceiver (``cache_transceiver_config.backend``: DEFAULT, UCX or NIXL).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from toolchain.specs.base import PLAN, RUNTIME, Strict

# Dynamo release -> (TensorRT-LLM its dynamo.trtllm needs, the runtime container its DGD templates use).
# Sources: ai-dynamo 1.6.1 wheel METADATA (Requires-Dist tensorrt-llm==1.3.0rc29; extra == 'trtllm') and
# dynamo/profiler/templates/dgd/trtllm/{agg,disagg}.yaml in that wheel.
RELEASES = {"1.6.1": ("1.3.0rc29", "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1")}
# Per-GPU, one-direction bandwidth (GB/s) of each link kind when the spec gives none: NVLink 4 (H100/H200
# HGX, 900 GB/s both directions), NVLink 5 (B200/GB200, 1.8 TB/s both directions), one InfiniBand NDR
# 400 Gb/s port (ConnectX-7) or XDR 800 Gb/s port per GPU. Ethernet has no default: say its speed.
LINK_GB_S = {"nvlink4": 450.0, "nvlink5": 900.0, "infiniband-ndr": 50.0, "infiniband-xdr": 100.0}
LinkKind = Literal["nvlink4", "nvlink5", "infiniband-ndr", "infiniband-xdr", "ethernet"]


class Pool(Strict):
    gpu: str | None = Field(
        None, max_length=64, description="GPU catalog name (default: the cell's GPU)", json_schema_extra=RUNTIME
    )
    tp: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Tensor parallel size of one worker (default: the cell's)",
        json_schema_extra=RUNTIME,
    )
    replicas: int | Literal["plan"] = Field(
        "plan",
        description="Workers in the pool, or 'plan' to size it from the SLOs and traffic",
        json_schema_extra=RUNTIME,
    )

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 1024:
            raise ValueError("replicas is between 1 and 1024, or 'plan'")
        return v


class Link(Strict):
    kind: LinkKind = Field(
        "infiniband-ndr", description="What carries KV from prefill to decode workers", json_schema_extra=PLAN
    )
    bandwidth_gb_s: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="Per-GPU one-direction bandwidth in GB/s (default by kind; required for ethernet)",
        json_schema_extra=PLAN,
    )

    @model_validator(mode="after")
    def _bandwidth(self) -> Link:
        if self.kind == "ethernet" and self.bandwidth_gb_s is None:
            raise ValueError("an ethernet link needs bandwidth_gb_s (e.g. 12.5 for 100 GbE, 50 for 400 GbE)")
        return self

    @property
    def gb_s(self) -> float:
        return self.bandwidth_gb_s if self.bandwidth_gb_s is not None else LINK_GB_S[self.kind]


class DynamoServing(Strict):
    mode: Literal["aggregated", "disaggregated"] = Field(
        "disaggregated", description="One pool doing both, or prefill and decode pools", json_schema_extra=RUNTIME
    )
    version: str = Field("1.6.1", max_length=32, description="NVIDIA Dynamo release", json_schema_extra=RUNTIME)
    router: Literal["kv", "round-robin", "random"] = Field(
        "kv", description="Frontend router mode (dynamo.frontend --router-mode)", json_schema_extra=RUNTIME
    )
    kv_transfer: Literal["default", "nixl", "ucx"] = Field(
        "default",
        description="KV transfer backend between pools (cache_transceiver_config.backend)",
        json_schema_extra=RUNTIME,
    )
    max_tokens_in_buffer: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="cache_transceiver_config.max_tokens_in_buffer (default: TensorRT-LLM's)",
        json_schema_extra=RUNTIME,
    )
    frontend_replicas: int = Field(
        1, ge=1, le=64, description="Frontend (HTTP + router) pods", json_schema_extra=RUNTIME
    )
    link: Link = Field(default_factory=Link)
    workers: Pool = Field(default_factory=Pool)
    prefill: Pool = Field(default_factory=Pool)
    decode: Pool = Field(default_factory=Pool)

    @model_validator(mode="after")
    def _pools(self) -> DynamoServing:
        if self.mode == "aggregated" and (self.prefill != Pool() or self.decode != Pool()):
            raise ValueError(
                "an aggregated deployment has one pool, 'workers'; prefill and decode are for disaggregated"
            )
        if self.mode == "disaggregated" and self.workers != Pool():
            raise ValueError("a disaggregated deployment has 'prefill' and 'decode' pools; 'workers' is for aggregated")
        return self

    @property
    def disaggregated(self) -> bool:
        return self.mode == "disaggregated"
