"""Pydantic models of an engine spec (the YAML files in ``engine_specs/``).

Every leaf field declares a *scope* in its ``json_schema_extra``:

- ``build``: changes the bytes of the built engine, so it is part of the engine key;
- ``runtime``: a serving knob; part of the profile id, never a rebuild;
- ``plan``: only used by the planner and reports (names, SLOs, traffic).

``toolchain.specs.fields.field_table()`` reads these declarations; a test holds that every
field has one and that keys and profile ids follow them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from toolchain.specs.base import BUILD, PLAN, RUNTIME, Strict
from toolchain.specs.dynamo import DynamoServing
from toolchain.specs.lora import LoraServing
from toolchain.specs.sources import HF_SOURCE, hf_repo_revision
from toolchain.specs.speculative import SpeculativeDecoding

WeightFormat = Literal["bf16", "fp16", "fp8", "int4_awq", "w4a8_awq", "int8_sq", "int8_wo", "nvfp4"]
KVCacheFormat = Literal["auto", "fp8", "int8"]
Runtime = Literal["tensorrt", "pytorch"]


# Patterns are matched with fullmatch (``$`` would accept a trailing newline) and are ASCII only.
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,6})?([a-z0-9.+]{0,32})")
_NAME = re.compile(r"[a-z0-9][a-z0-9._\-]{0,79}")

# Bounds every numeric field obeys: engine shapes are int32 in TensorRT-LLM (trtllm-build takes
# C int arguments), and no float may be inf, nan or so large that the planner's arithmetic overflows.
INT32_MAX = 2**31 - 1
MAX_FLOAT = 1e9
# The matrix is the product of its axes; one spec is one CI fan-out, so keep it to what a CI runs.
MAX_AXIS_VALUES = 256
MAX_CELLS = 10_000


class ModelSource(Strict):
    source: str = Field(
        max_length=4096,
        description="Checkpoint: a local directory (relative to the spec file) or hf://org/name@revision",
        json_schema_extra=BUILD,
    )
    dtype: Literal["bfloat16", "float16"] = Field(
        "bfloat16", description="Dtype of unquantized tensors in the checkpoint and engine", json_schema_extra=BUILD
    )
    architecture: str | None = Field(
        None,
        max_length=128,
        description="Name in the planner's offline architecture catalog, used when config.json is not at hand",
        json_schema_extra=PLAN,
    )

    @field_validator("source")
    @classmethod
    def _check_source(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model.source is empty; give a local directory or hf://org/name@revision")
        if v.startswith("hf://") and not HF_SOURCE.fullmatch(v):
            raise ValueError(f"'{v}' is not hf://org/name[@revision]")
        if "://" in v and not v.startswith("hf://"):
            raise ValueError(f"unsupported scheme in '{v[:80]}'; use a local directory or hf://org/name@revision")
        if any(len(part.encode()) > 255 for part in v.split("/")):
            raise ValueError("model.source has a path component longer than 255 bytes (the file-system limit)")
        return v

    @property
    def is_hf(self) -> bool:
        return self.source.startswith("hf://")

    def hf_repo_revision(self) -> tuple[str, str | None]:
        return hf_repo_revision(self.source)


class Calibration(Strict):
    dataset: str = Field(
        "builtin",
        max_length=4096,
        description="'builtin' (small text set shipped here), a local .txt/.jsonl path, or hf:<dataset name>",
        json_schema_extra=BUILD,
    )
    samples: int = Field(64, ge=1, le=4096, description="Number of calibration samples", json_schema_extra=BUILD)
    seq_len: int = Field(256, ge=8, le=8192, description="Tokens per calibration sample", json_schema_extra=BUILD)
    batch_size: int = Field(4, ge=1, le=256, description="Calibration batch size", json_schema_extra=BUILD)
    seed: int = Field(1234, ge=0, le=2**32 - 1, description="Seed for sample selection", json_schema_extra=BUILD)


class AccuracyGate(Strict):
    max_rel_logit_error: float = Field(
        0.35,
        gt=0,
        le=1000,
        description="Fail when ||logits_q - logits|| / ||logits|| exceeds this",
        json_schema_extra=PLAN,
    )
    min_top1_agreement: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Fail when argmax agreement with the original is below this",
        json_schema_extra=PLAN,
    )
    max_ppl_increase: float = Field(
        0.5, ge=0, le=1000, description="Fail when perplexity grows by more than this fraction", json_schema_extra=PLAN
    )


class Quantization(Strict):
    weights: WeightFormat = Field("bf16", description="Weight format", json_schema_extra=BUILD)
    kv_cache: KVCacheFormat = Field(
        "auto", description="KV-cache dtype: auto (= model dtype), fp8 or int8", json_schema_extra=BUILD
    )
    awq_group_size: int = Field(128, description="AWQ group size (INT4/W4A8)", json_schema_extra=BUILD)
    calibration: Calibration = Field(default_factory=Calibration)
    accuracy: AccuracyGate = Field(default_factory=AccuracyGate)

    @field_validator("awq_group_size")
    @classmethod
    def _group(cls, v: int) -> int:
        if v not in (32, 64, 128):
            raise ValueError(f"awq_group_size {v} is not one of 32, 64, 128")
        return v


class Parallelism(Strict):
    tp: int = Field(
        1, ge=1, le=64, description="Tensor parallel size (overridden by matrix.tp)", json_schema_extra=BUILD
    )
    pp: int = Field(1, ge=1, le=64, description="Pipeline parallel size", json_schema_extra=BUILD)


class Matrix(Strict):
    gpu: list[str] = Field(
        min_length=1, max_length=MAX_AXIS_VALUES, description="GPU catalog names", json_schema_extra=BUILD
    )
    max_batch_size: list[int] = Field(
        min_length=1, max_length=MAX_AXIS_VALUES, description="Engine max batch sizes", json_schema_extra=BUILD
    )
    max_seq_len: list[int] = Field(
        min_length=1,
        max_length=MAX_AXIS_VALUES,
        description="Engine max sequence lengths (prompt + output)",
        json_schema_extra=BUILD,
    )
    max_input_len: list[int] | None = Field(
        None,
        max_length=MAX_AXIS_VALUES,
        description="Engine max prompt lengths (default: half of max_seq_len)",
        json_schema_extra=BUILD,
    )
    tp: list[int] | None = Field(
        None,
        max_length=MAX_AXIS_VALUES,
        description="Tensor parallel sizes (default: parallelism.tp)",
        json_schema_extra=BUILD,
    )

    @field_validator("max_batch_size", "max_seq_len", "max_input_len", "tp")
    @classmethod
    def _positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None:
            if any(x <= 0 or x > INT32_MAX for x in v):
                raise ValueError(f"every value must be a positive integer up to {INT32_MAX} (int32)")
            if len(set(v)) != len(v):
                raise ValueError("values must not repeat")
        return v

    @field_validator("max_seq_len")
    @classmethod
    def _room_for_output(cls, v: list[int]) -> list[int]:
        if any(x < 2 for x in v):
            raise ValueError(
                "a max_seq_len of 1 leaves no room for an output token after a one-token prompt; "
                "every value must be at least 2 (prompt + output)"
            )
        return v

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x > 64 for x in v):
            raise ValueError("a tensor parallel size is at most 64")
        return v

    @field_validator("gpu")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if any(len(g) > 64 for g in v):
            raise ValueError("a GPU name is at most 64 characters (see `toolchain gpus`)")
        if len({g.lower() for g in v}) != len(v):
            raise ValueError("GPU names must not repeat")
        return v

    @model_validator(mode="after")
    def _size(self) -> Matrix:
        n = len(self.gpu) * len(self.max_batch_size) * len(self.max_seq_len) * len(self.tp or [1])
        n *= len(self.max_input_len or [1])
        if n > MAX_CELLS:
            raise ValueError(
                f"the matrix has {n:,} cells (the product of its axes); the limit is {MAX_CELLS:,}; "
                "split it into several specs or drop axis values"
            )
        return self


class BuildOptions(Strict):
    max_num_tokens: int = Field(
        8192, ge=1, le=INT32_MAX, description="trtllm-build --max_num_tokens", json_schema_extra=BUILD
    )
    max_beam_width: int = Field(1, ge=1, le=16, description="trtllm-build --max_beam_width", json_schema_extra=BUILD)
    kv_cache_type: Literal["paged", "continuous"] = Field(
        "paged", description="trtllm-build --kv_cache_type", json_schema_extra=BUILD
    )
    tokens_per_block: int = Field(32, description="Paged KV block size (power of 2)", json_schema_extra=BUILD)
    multiple_profiles: bool = Field(True, description="trtllm-build --multiple_profiles", json_schema_extra=BUILD)
    gemm_plugin: Literal["auto", "bfloat16", "float16", "fp8", "nvfp4", "disable"] | None = Field(
        None,
        description="GEMM plugin; unset chooses by precision (auto for BF16/FP16, disable for FP8, nvfp4 for NVFP4)",
        json_schema_extra=BUILD,
    )
    use_fp8_context_fmha: bool | None = Field(
        None,
        description="FP8 context FMHA; unset enables it where allowed (SM>=89 with FP8 KV)",
        json_schema_extra=BUILD,
    )
    use_paged_context_fmha: bool | None = Field(
        None,
        description="Paged context FMHA; unset enables it (needed for prefix caching and chunked prefill)",
        json_schema_extra=BUILD,
    )
    logits_dtype: Literal["float32", "float16"] = Field(
        "float32", description="trtllm-build --logits_dtype", json_schema_extra=BUILD
    )
    reduce_fusion: bool = Field(
        False, description="AllReduce+RMSNorm fusion (Llama/Mistral with TP>1)", json_schema_extra=BUILD
    )

    @field_validator("tokens_per_block")
    @classmethod
    def _pow2(cls, v: int) -> int:
        if v < 8 or v > 256 or v & (v - 1):
            raise ValueError(f"tokens_per_block {v} must be a power of 2 between 8 and 256")
        return v


class CudaGraphs(Strict):
    enabled: bool = Field(True, description="Capture CUDA graphs for decode steps", json_schema_extra=RUNTIME)
    batch_sizes: list[int] | None = Field(
        None,
        max_length=MAX_AXIS_VALUES,
        description="Decode batch sizes to capture (default: powers of 2 up to max batch). runtime pytorch: "
        "captured exactly; runtime tensorrt: the backend captures each batch as it occurs and keeps this many "
        "graphs (cuda_graph_cache_size)",
        json_schema_extra=RUNTIME,
    )
    padding: bool = Field(
        True,
        description="runtime pytorch: pad batches up to the next captured size; runtime tensorrt cannot pad "
        "(setting it there is refused)",
        json_schema_extra=RUNTIME,
    )
    cache_size: int = Field(
        0,
        ge=0,
        le=INT32_MAX,
        description="runtime tensorrt: graphs the backend keeps (cuda_graph_cache_size, LRU, at most the engine "
        "max batch); 0: one per batch size above",
        json_schema_extra=RUNTIME,
    )

    @field_validator("batch_sizes")
    @classmethod
    def _sizes(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x < 1 or x > INT32_MAX for x in v):
            raise ValueError(f"every CUDA-graph batch size must be between 1 and {INT32_MAX}")
        return v


class Instances(Strict):
    preprocessing: int = Field(1, ge=1, le=64, description="Tokenizer model instances", json_schema_extra=RUNTIME)
    postprocessing: int = Field(1, ge=1, le=64, description="Detokenizer model instances", json_schema_extra=RUNTIME)
    bls: int = Field(1, ge=1, le=1024, description="BLS model instances", json_schema_extra=RUNTIME)


class Serving(Strict):
    batching: Literal["inflight_fused_batching", "V1"] = Field(
        "inflight_fused_batching", description="Triton gpt_model_type", json_schema_extra=RUNTIME
    )
    kv_cache_free_gpu_mem_fraction: float = Field(
        0.9, gt=0, le=1, description="Fraction of free GPU memory given to the KV cache", json_schema_extra=RUNTIME
    )
    max_tokens_in_paged_kv_cache: int | None = Field(
        None, ge=1, le=INT32_MAX, description="Hard cap on KV tokens (min with the fraction)", json_schema_extra=RUNTIME
    )
    enable_prefix_caching: bool = Field(True, description="KV-cache block reuse", json_schema_extra=RUNTIME)
    enable_chunked_prefill: bool = Field(True, description="Chunked context", json_schema_extra=RUNTIME)
    scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = Field(
        "guaranteed_no_evict", description="Batch scheduler policy", json_schema_extra=RUNTIME
    )
    cuda_graphs: CudaGraphs = Field(default_factory=CudaGraphs)
    streaming: bool = Field(True, description="Serve token streaming", json_schema_extra=RUNTIME)
    decoupled: bool = Field(
        True, description="Triton decoupled transaction policy (required for streaming)", json_schema_extra=RUNTIME
    )
    max_queue_delay_us: int = Field(
        0, ge=0, le=INT32_MAX, description="Dynamic batcher max queue delay (µs)", json_schema_extra=RUNTIME
    )
    max_queue_size: int = Field(
        0, ge=0, le=INT32_MAX, description="Max queued requests (0: unbounded)", json_schema_extra=RUNTIME
    )
    exclude_input_in_output: bool = Field(True, description="Return only generated tokens", json_schema_extra=RUNTIME)
    instances: Instances = Field(default_factory=Instances)
    gpu_device_ids: list[list[int]] | None = Field(
        None,
        max_length=1024,
        description="GPUs per tensorrt_llm instance, e.g. [[0,1],[2,3]] (Triton gpu_device_ids)",
        json_schema_extra=RUNTIME,
    )

    @field_validator("gpu_device_ids")
    @classmethod
    def _ids(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        if v is not None and any(not ids or len(ids) > 1024 or any(i < 0 or i > 1023 for i in ids) for ids in v):
            raise ValueError("each instance lists 1-1024 GPU ids between 0 and 1023")
        return v


class Percentiles(Strict):
    p50: float | None = Field(None, gt=0, le=MAX_FLOAT, description="Median target (ms)", json_schema_extra=PLAN)
    p90: float | None = Field(None, gt=0, le=MAX_FLOAT, description="P90 target (ms)", json_schema_extra=PLAN)
    p99: float | None = Field(None, gt=0, le=MAX_FLOAT, description="P99 target (ms)", json_schema_extra=PLAN)


class SLO(Strict):
    ttft_ms: Percentiles = Field(default_factory=Percentiles)
    tpot_ms: Percentiles = Field(default_factory=Percentiles)


class TokenDist(Strict):
    dist: Literal["fixed", "normal", "uniform"] = Field("fixed", description="Distribution", json_schema_extra=PLAN)
    mean: int = Field(gt=0, le=INT32_MAX, description="Mean tokens", json_schema_extra=PLAN)
    std: float = Field(0, ge=0, le=INT32_MAX, description="Std deviation (normal)", json_schema_extra=PLAN)
    min: int | None = Field(
        None, ge=1, le=INT32_MAX, description="Lower bound (uniform/normal clip)", json_schema_extra=PLAN
    )
    max: int | None = Field(
        None, ge=1, le=INT32_MAX, description="Upper bound (uniform/normal clip)", json_schema_extra=PLAN
    )

    @model_validator(mode="after")
    def _bounds(self) -> TokenDist:
        if self.dist == "uniform" and (self.min is None or self.max is None):
            raise ValueError("a uniform distribution needs min and max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self


class Speculative(Strict):
    draft_len: int = Field(ge=1, le=64, description="Draft tokens per step (K)", json_schema_extra=PLAN)
    acceptance_rate: float = Field(
        ge=0.001, le=0.999, description="Per-token acceptance rate α", json_schema_extra=PLAN
    )


class Traffic(Strict):
    peak_rps: float = Field(ge=1e-6, le=MAX_FLOAT, description="Peak requests per second", json_schema_extra=PLAN)
    input_tokens: TokenDist
    output_tokens: TokenDist
    target_utilization: float = Field(
        0.75, ge=0.001, le=1, description="Fleet utilization target", json_schema_extra=PLAN
    )
    burst_headroom: float = Field(1.2, ge=1, le=1000, description="Burst headroom multiplier", json_schema_extra=PLAN)
    mfu: float = Field(
        0.5, ge=0.001, le=1, description="Prefill model-FLOPs utilization assumed", json_schema_extra=PLAN
    )
    speculative: Speculative | None = None


class Target(Strict):
    trtllm_version: str = Field(
        max_length=64,
        description="TensorRT-LLM release: 1.0-1.2.x build engines; 1.2.x and the 1.3 line run the PyTorch runtime",
        json_schema_extra=BUILD,
    )
    tensorrt_version: str | None = Field(
        None,
        max_length=64,
        description="TensorRT inside that release's container (runtime tensorrt; default: the release's own)",
        json_schema_extra=BUILD,
    )
    container: str | None = Field(
        None,
        max_length=512,
        description="Container image the build runs in (default: the Triton container of the release)",
        json_schema_extra=PLAN,
    )

    @field_validator("trtllm_version", "tensorrt_version")
    @classmethod
    def _ver(cls, v: str | None) -> str | None:
        if v is not None and not _VERSION.fullmatch(v):
            raise ValueError(f"'{v}' is not a version like 1.2.1")
        return v

    def tensorrt(self) -> str | None:
        """The TensorRT version: the spec's, else the one the release ships (None for 1.3: no TensorRT)."""
        from toolchain.specs.releases import tensorrt_of

        return self.tensorrt_version or tensorrt_of(self.trtllm_version)


class EngineSpec(Strict):
    name: str = Field(max_length=80, description="Spec name", json_schema_extra=PLAN)
    description: str = Field("", max_length=10_000, description="Free text", json_schema_extra=PLAN)
    model: ModelSource
    quantization: Quantization = Field(default_factory=Quantization)
    runtime: Runtime = Field(
        "pytorch",
        description="pytorch (LLM API; the default from TensorRT-LLM 1.2) or tensorrt (engines, 1.0-1.2.x)",
        json_schema_extra=BUILD,
    )
    target: Target
    parallelism: Parallelism = Field(default_factory=Parallelism)
    matrix: Matrix
    build: BuildOptions = Field(default_factory=BuildOptions)
    serving: Serving = Field(default_factory=Serving)
    speculative: SpeculativeDecoding | None = None
    lora: LoraServing | None = None
    dynamo: DynamoServing | None = None
    slo: SLO = Field(default_factory=SLO)
    traffic: Traffic | None = None

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @model_validator(mode="before")
    @classmethod
    def _default_runtime(cls, data: Any) -> Any:
        """An omitted ``runtime`` is ``pytorch`` on every release whose LLM API the toolchain writes for
        (1.2.x and the 1.3 line), ``tensorrt`` on 1.0-1.1 (docs/releases.md)."""
        if isinstance(data, dict) and "runtime" not in data:
            target = data.get("target")
            version = target.get("trtllm_version") if isinstance(target, dict) else None
            if isinstance(version, str):
                from toolchain.specs.releases import default_runtime

                return {**data, "runtime": default_runtime(version)}
        return data

    @property
    def base_dir(self) -> Path:
        """Directory relative paths in the spec are resolved against (the spec file's)."""
        return self._base_dir

    def with_base_dir(self, base: Path) -> EngineSpec:
        self._base_dir = base
        return self

    def local_source(self) -> Path | None:
        """The checkpoint directory for a local source, resolved against the spec file."""
        if self.model.is_hf:
            return None
        p = Path(self.model.source).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError(f"name '{v}' must be lowercase letters, digits, '.', '_' or '-' (max 80)")
        return v


def schema() -> dict[str, Any]:
    """JSON Schema of the spec, for editors (yaml-language-server) and docs."""
    from toolchain.hardware.catalog import CATALOG

    s = EngineSpec.model_json_schema()
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "toolchain engine spec"
    # GPU names the loader accepts: catalog names and full NVML names (`toolchain gpus` lists them)
    names = sorted({g.name for g in CATALOG.values()} | {g.nvml_name for g in CATALOG.values()})
    s["$defs"]["Matrix"]["properties"]["gpu"]["items"] = {"type": "string", "enum": names}
    return s
