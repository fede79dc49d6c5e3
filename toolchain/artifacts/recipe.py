"""The quantization recipe: what turns a source checkpoint into a quantized one (part of its identity)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from toolchain.specs.models import EngineSpec

# The quantizer whose output a quantized-checkpoint key and an engine key stand for (pinned in
# pyproject's [quantize] extra).
QUANTIZER = "nvidia-modelopt==0.47.0"


@dataclass(frozen=True)
class Recipe:
    """ModelOpt quantization of one checkpoint for one parallel mapping (the export bakes TP/PP in)."""

    weights: str
    kv_cache: str = "none"
    awq_group_size: int = 128
    dataset: str = "builtin"
    samples: int = 64
    seq_len: int = 256
    batch_size: int = 4
    seed: int = 1234
    dtype: str = "bfloat16"
    tp: int = 1
    pp: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recipe_from_spec(spec: EngineSpec, tp: int = 1, pp: int = 1) -> Recipe:
    q = spec.quantization
    c = q.calibration
    return Recipe(
        weights=q.weights,
        kv_cache="fp8" if q.kv_cache == "fp8" else ("int8" if q.kv_cache == "int8" else "none"),
        awq_group_size=q.awq_group_size,
        dataset=c.dataset,
        samples=c.samples,
        seq_len=c.seq_len,
        batch_size=c.batch_size,
        seed=c.seed,
        dtype=spec.model.dtype,
        tp=tp,
        pp=pp,
    )


def is_unquantized(spec: EngineSpec) -> bool:
    """The spec asks for no quantization: the source checkpoint is built as it is."""
    q = spec.quantization
    return q.weights in ("bf16", "fp16") and q.kv_cache == "auto"
