"""The ``lora`` block read against the whole spec.

Kept apart from toolchain/specs/lora.py (the block's model, which models.py imports) so that no module of
the package needs the other's types both ways.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.specs.base import Problem

if TYPE_CHECKING:
    from toolchain.specs.models import EngineSpec


def problems(spec: EngineSpec) -> list[Problem]:

    lo = spec.lora
    if lo is None:
        return []
    out: list[Problem] = []
    if lo.max_rank > lo.cache.max_adapter_size:
        out.append(
            Problem(
                None,
                f"lora.max_rank {lo.max_rank} exceeds lora.cache.max_adapter_size {lo.cache.max_adapter_size}: a "
                "cache page row holds at most max_adapter_size ranks of one module and layer",
                f"set lora.cache.max_adapter_size to at least {lo.max_rank}",
            )
        )
    if spec.runtime == "tensorrt" and lo.max_loras is not None:
        out.append(
            Problem(
                None,
                "lora.max_loras is an LLM-API (pytorch runtime) option; the Triton backend sizes its adapter "
                "cache with lora.cache",
                "remove lora.max_loras or use runtime: pytorch",
            )
        )
    return out
