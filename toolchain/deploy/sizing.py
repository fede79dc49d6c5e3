"""Pod and fleet sizing for one cell, from the spec and the planner's result (passed in, never computed here).

- GPUs per replica = TP × PP; a replica is one serving instance (one tritonserver world).
- Nodes per replica = ceil(TP × PP ÷ GPUs per node); more than one node makes a LeaderWorkerSet.
- Replicas: the planner sizes the fleet in instances (``CellPlan.sizing_fleet``: the silicon estimate's fleet
  where the cell has one, the roofline floor's, a lower bound, only where it has none, and the source says
  which). ``min`` = ceil(raw instances), the instances that carry the spec's peak token rate at the SLO batch;
  ``max`` = total instances, which adds the utilization target and the burst headroom. For TP > 1 these are
  instances (pods), not GPUs.
- ``/dev/shm`` (a memory volume): 1 GiB per rank for NCCL's shared-memory transport and MPI, plus 1 GiB for
  Triton's Python-backend regions and tensors (the TensorRT-LLM backend's quick start runs its container
  with ``--shm-size=2g`` for one rank; see docs/deploy.md).
- Startup budget: the entrypoint pulls and verifies the engine before the server starts, so the startup
  probe covers pull (engine bytes ÷ pull rate) + verify (÷ hash rate) + load (bytes per rank ÷ load rate)
  + a fixed allowance for the server, the executor and CUDA-graph capture, times a safety factor.
  Engine bytes ≈ the planner's weight bytes (an engine holds the weights of its rank and little else).
- Host memory per pod: the request is the memory volume + the page cache of one rank's engine (at most 32 GiB)
  + 8 GiB for the server; the limit adds every rank of the pod holding its whole engine in host memory at once
  (TensorRT reads an engine into host memory before copying it to the GPU) + 8 GiB more for the frontend,
  tokenizers and MPI, so loading never meets the OOM killer while a runaway process still does. ``/dev/shm``
  counts against the limit (a memory-backed volume is charged to the pod).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from toolchain.artifacts.plan import CellPlan
from toolchain.deploy.core import SHM_BASE, SHM_PER_RANK, server_memory
from toolchain.errors import DeployError
from toolchain.specs.matrix import Cell

GIB = 2**30
PULL_BYTES_S = 250e6  # registry → pod (S3 / Hub), conservative per pod
VERIFY_BYTES_S = 1.0e9  # blake3 runs at ~3.9 GB/s on one core here; shared nodes are slower
LOAD_BYTES_S = 1.0e9  # local disk → GPU, per rank
FIXED_START_S = 120.0  # server start, executor, KV allocation, CUDA-graph capture
SAFETY = 1.5
STARTUP_PERIOD_S = 10
ENGINE_OVERHEAD = 1.05  # engine files beyond the raw weights (plugins, tables), and the disk volume's slack
DEFAULT_GPUS_PER_NODE = 8  # HGX / DGX H100, H200, B200


@dataclass(frozen=True)
class Sizing:
    cell_id: str
    ranks: int
    gpus_per_replica: int
    gpus_per_node: int
    nodes_per_replica: int
    min_replicas: int
    max_replicas: int
    replicas_source: str
    shm_bytes: int
    engine_bytes_total: int
    engine_bytes_per_rank: int
    engine_volume_bytes: int
    startup_budget_s: int
    startup_failure_threshold: int
    startup_period_s: int
    memory_request_bytes: int
    memory_limit_bytes: int

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_replica > 1

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "multi_node": self.multi_node}

    def explain(self) -> list[str]:
        g = 1e9
        return [
            f"GPUs per replica = TP × PP = {self.ranks}; nodes per replica = ceil({self.ranks} ÷ "
            f"{self.gpus_per_node}) = {self.nodes_per_replica}",
            f"replicas = {self.min_replicas}..{self.max_replicas} instances ({self.replicas_source})",
            f"/dev/shm = {-(-self.ranks // self.nodes_per_replica)} rank(s) per pod × 1 GiB + 1 GiB = "
            f"{self.shm_bytes / GIB:.0f} GiB",
            f"startup budget = ({self.engine_bytes_total / g:.1f} GB ÷ {PULL_BYTES_S / 1e6:.0f} MB/s pull + "
            f"{self.engine_bytes_total / g:.1f} GB ÷ {VERIFY_BYTES_S / g:.1f} GB/s verify + "
            f"{self.engine_bytes_per_rank / g:.1f} GB ÷ {LOAD_BYTES_S / g:.1f} GB/s load + {FIXED_START_S:.0f} s) × "
            f"{SAFETY:g} = {self.startup_budget_s} s → {self.startup_failure_threshold} × {self.startup_period_s} s",
            f"host memory per pod: request {self.memory_request_bytes / GIB:.0f} GiB (/dev/shm + one rank's engine "
            f"pages up to 32 GiB + 8 GiB), limit {self.memory_limit_bytes / GIB:.0f} GiB (/dev/shm + every rank's "
            "engine in host memory while it loads + 16 GiB)",
        ]


def startup_budget_s(engine_bytes_total: float, engine_bytes_per_rank: float) -> int:
    seconds = (
        engine_bytes_total / PULL_BYTES_S
        + engine_bytes_total / VERIFY_BYTES_S
        + engine_bytes_per_rank / LOAD_BYTES_S
        + FIXED_START_S
    ) * SAFETY
    return int(math.ceil(seconds / STARTUP_PERIOD_S) * STARTUP_PERIOD_S)


def size_cell(
    cell: Cell,
    plan: CellPlan,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
) -> Sizing:
    """Size the pods and the fleet of ``cell`` from ``plan`` (the planner's result for that cell)."""
    if plan.cell_id != cell.id:
        raise DeployError(f"the plan is for cell {plan.cell_id}, not {cell.id}", "plan the cell you deploy")
    if gpus_per_node < 1:
        raise DeployError(f"--gpus-per-node {gpus_per_node} must be at least 1", "give the GPUs of one node")
    ranks = cell.tp * cell.pp
    nodes = -(-ranks // gpus_per_node)
    fleet, basis = plan.sizing_fleet()
    if fleet is not None:
        lo = max(1, math.ceil(round(float(fleet["raw_instances"]), 9)))  # the planner's ceiling, float noise aside
        hi = max(lo, int(fleet["total_instances"]))
        traffic = cell.spec.traffic
        util = f"utilization {traffic.target_utilization:g} × headroom {traffic.burst_headroom:g}" if traffic else ""
        source = (
            f"{basis}: peak {fleet['peak_tok_s']:,.0f} tok/s ÷ {fleet['tok_s_per_instance']:,.0f} tok/s per instance "
            f"= {fleet['raw_instances']:.2f} instances → min {lo}; ÷ {util} → {fleet['total_gpus']} GPUs "
            f"= max {hi} instances of {fleet['gpus_per_instance']} GPU{'' if fleet['gpus_per_instance'] == 1 else 's'}"
        )
    else:
        lo, hi = 1, 1
        source = f"{basis}: 1 replica"
    if min_replicas is not None or max_replicas is not None:
        lo = min_replicas if min_replicas is not None else lo
        hi = max_replicas if max_replicas is not None else max(hi, lo)
        source += f"; overridden to {lo}..{hi}"
    if lo < 1 or hi < lo:
        raise DeployError(
            f"replicas {lo}..{hi} are not a range of at least one replica", "pass --min-replicas <= --max-replicas"
        )
    per_rank = int(plan.weight_bytes_per_gpu * ENGINE_OVERHEAD)
    total = int(plan.weight_bytes_total * ENGINE_OVERHEAD)
    budget = startup_budget_s(total, per_rank)
    ranks_per_pod = ranks if nodes == 1 else -(-ranks // nodes)  # a group's pods each hold one node's ranks
    shm = SHM_PER_RANK * ranks_per_pod + SHM_BASE
    memory = server_memory(per_rank, ranks_per_pod)  # the same rule as the Dynamo workers'
    return Sizing(
        cell_id=cell.id,
        ranks=ranks,
        gpus_per_replica=ranks,
        gpus_per_node=gpus_per_node,
        nodes_per_replica=nodes,
        min_replicas=lo,
        max_replicas=hi,
        replicas_source=source,
        shm_bytes=shm,
        engine_bytes_total=total,
        engine_bytes_per_rank=per_rank,
        engine_volume_bytes=_round_gib(total * 1.1 + GIB),
        startup_budget_s=budget,
        startup_failure_threshold=budget // STARTUP_PERIOD_S,
        startup_period_s=STARTUP_PERIOD_S,
        # page cache of the engine files being loaded + the memory volume + the server itself
        memory_request_bytes=memory[0],
        memory_limit_bytes=memory[1],
    )


def _round_gib(n: float) -> int:
    return int(math.ceil(n / GIB) * GIB)
