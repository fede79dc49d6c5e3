"""The latency targets a spec's SLOs set for one request: P99 where given, else P50 (what `bench` measures goodput
against and what an emitted repository records, so that `bench --repo` knows them without the spec)."""

from __future__ import annotations

from toolchain.specs.models import EngineSpec


def slo_targets(spec: EngineSpec) -> dict[str, float | None]:
    """``{"ttft_ms": ..., "tpot_ms": ...}``: each the P99 target where the spec gives one, else its P50, else None."""
    return {
        "ttft_ms": spec.slo.ttft_ms.p99 or spec.slo.ttft_ms.p50,
        "tpot_ms": spec.slo.tpot_ms.p99 or spec.slo.tpot_ms.p50,
    }
