"""What the planner concludes for one matrix cell (``toolchain plan``), as the type the other stages read.

``toolchain.planning.plan`` computes it; deploy sizes pods from it and the pipeline passes it along. It sits here,
below the stages, so that each of them reads this one type instead of a Protocol copy of its fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CellPlan:
    cell_id: str
    gpu: str
    weights: str
    kv_cache: str
    tp: int
    pp: int
    params: float
    params_source: str
    weight_bytes_total: float
    weight_bytes_per_gpu: float
    activation_bytes: float
    logits_bytes: float
    cuda_graph_bytes: float
    reserve_bytes: float
    gpu_memory_bytes: float
    free_bytes: float
    kv_budget_bytes: float
    kv_bytes_per_token: float
    kv_tokens: int
    avg_context: int
    max_concurrency_at_max_seq: int
    max_concurrency_at_avg: int
    kv_use_at_max_batch: float
    tpot_floor_b1_ms: float
    tpot_floor_kv_batch_ms: float
    kv_batch: int
    prefill_ms_avg_input: float
    mfu: float
    avg_input: int
    decode_read_bytes_per_gpu: float = 0.0
    tpot_target_ms: float | None = None
    batch_at_sla: int | None = None
    tok_s_per_gpu_at_sla: float | None = None
    fleet: dict[str, Any] | None = None  # the floor's fleet: a lower bound on GPUs
    tpot_floor_at_sla_ms: float | None = None  # the floor's TPOT at batch_at_sla (what the floor fleet is sized at)
    estimator: str = "floor"  # what produced the estimate columns: "floor" or "aiconfigurator 0.12.0"
    estimate: dict[str, Any] | None = None  # AIConfigurator's figures (toolchain.planning.estimate)
    fleet_estimate: dict[str, Any] | None = None  # the fleet at the batch the estimate says meets the SLOs
    no_estimate: str | None = None  # why this cell has no silicon estimate (None: it has one, or none was asked)
    speculative_tokens: float | None = None
    features: dict[str, Any] = field(default_factory=dict)  # speculative and LoRA (planning.speculative)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def sizing_fleet(self) -> tuple[dict[str, Any] | None, str]:
        """The one fleet every stage sizes by (``plan``'s headline GPUs, deploy's replicas and autoscaler
        bounds): the silicon estimate's where the cell has one, else the roofline floor's (a lower bound), and a
        phrase that says which. (None, why) when the planner sized no fleet."""
        if self.fleet_estimate:
            return self.fleet_estimate, f"silicon estimate ({self.estimator})"
        if self.fleet:
            why = self.no_estimate or "--estimator floor"
            return self.fleet, f"roofline floor, a lower bound: no silicon estimate ({why})"
        return None, "the planner sized no fleet (the spec has no traffic section or no TPOT SLO)"
