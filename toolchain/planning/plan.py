"""Plan one matrix cell: memory fit, KV budget and concurrency, floors, fleet size.

Memory model per GPU (every term shown by ``toolchain plan --explain``):

    free      = GPU memory − weights/(TP·PP) − activations − logits − CUDA graphs − runtime reserve
    KV budget = free × kv_cache_free_gpu_mem_fraction (capped by max_tokens_in_paged_kv_cache)

    activations  = max_num_tokens × (8·hidden + 3·intermediate/TP) × 2 B   (peak of one context chunk)
    logits       = max_batch_size × vocab × 4 B                           (FP32 generation logits)
    CUDA graphs  = 64 MiB × captured batch sizes (when enabled)
    reserve      = 1.5 GB (CUDA context, cuBLAS/NCCL workspaces, TensorRT runtime)
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from toolchain.artifacts.plan import CellPlan as CellPlan  # the planner's record, where every stage can read it
from toolchain.hardware.catalog import lookup_gpu
from toolchain.planning import bytes as B
from toolchain.planning.perf import (
    Fleet,
    ceil_clean,
    fleet_arithmetic,
    fleet_size,
    prefill_ms,
    speculative_tokens,
    tpot_floor_ms,
)
from toolchain.planning.speculative import feature_explain, feature_plan
from toolchain.specs.arch import ModelArch
from toolchain.specs.matrix import Cell
from toolchain.specs.models import Traffic

RESERVE_BYTES = 1.5e9
GRAPH_BYTES = 64 * 2**20
KV_WARN_FRACTION = 0.8


def cuda_graph_batches(cell: Cell) -> list[int]:
    cg = cell.spec.serving.cuda_graphs
    if not cg.enabled:
        return []
    if cg.batch_sizes:
        return sorted(cg.batch_sizes)
    out, b = [], 1
    while b < cell.max_batch_size:
        out.append(b)
        b *= 2
    out.append(cell.max_batch_size)
    return out


def _tokens_rounded(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


def _target(p: Any) -> float | None:
    value: float | None = p.p99 or p.p90 or p.p50
    return value


def _average_lengths(cell: Cell) -> tuple[int, int]:
    """Mean input tokens and mean context (input + output, at most max_seq_len): traffic's, or half the limits."""
    traffic = cell.spec.traffic
    avg_in = traffic.input_tokens.mean if traffic else cell.max_input_len // 2
    avg_out = traffic.output_tokens.mean if traffic else (cell.max_seq_len - cell.max_input_len) // 2
    return avg_in, min(cell.max_seq_len, avg_in + avg_out)


def _kv_budget(cell: Cell, free: float, kv_tok: float) -> tuple[float, int]:
    """KV budget bytes and tokens: the free-memory fraction, capped by max_tokens_in_paged_kv_cache."""
    s = cell.spec.serving
    budget = max(0.0, free) * s.kv_cache_free_gpu_mem_fraction
    kv_tokens = int(budget // kv_tok) if kv_tok else 0
    if s.max_tokens_in_paged_kv_cache is not None:
        kv_tokens = min(kv_tokens, s.max_tokens_in_paged_kv_cache)
        budget = min(budget, kv_tokens * kv_tok)
    return budget, kv_tokens


def _decode_read_bytes(cell: Cell, arch: ModelArch, batch: int) -> float:
    """Weight bytes one TP rank reads per decode step of ``batch``: the step walks every PP stage in turn."""
    q = cell.spec.quantization
    return B.decode_weight_bytes(arch, q.weights, cell.spec.model.dtype, q.awq_group_size, batch) / cell.tp


def floor_tpot_ms_at(plan: CellPlan, cell: Cell, arch: ModelArch, batch: int) -> float:
    """The floor's TPOT at ``batch``: the weights one step reads plus the KV of ``batch`` mean contexts, ÷ HBM."""
    kv_read = plan.kv_bytes_per_token * cell.pp * plan.avg_context * batch
    return tpot_floor_ms(_decode_read_bytes(cell, arch, batch), kv_read, cell.gpu.hbm_bytes_s)


def _base_plan(cell: Cell, arch: ModelArch) -> CellPlan:
    """The plan's numbers (memory terms, KV budget, concurrency, TPOT floors, prefill), before any check."""
    spec, gpu = cell.spec, cell.gpu
    q, tpb = spec.quantization, spec.build.tokens_per_block
    w_total = B.weight_bytes(arch, q.weights, spec.model.dtype, q.awq_group_size)
    w_gpu = w_total / (cell.tp * cell.pp)
    act = spec.build.max_num_tokens * (8 * arch.hidden_size + 3 * arch.intermediate_size / cell.tp) * 2
    logits = cell.max_batch_size * arch.vocab_size * 4.0
    graphs = GRAPH_BYTES * len(cuda_graph_batches(cell))
    free = gpu.memory_bytes - w_gpu - act - logits - graphs - RESERVE_BYTES
    kv_tok = B.kv_bytes_per_token(arch, B.kv_dtype_bytes(q.kv_cache, spec.model.dtype), cell.tp, cell.pp)
    budget, kv_tokens = _kv_budget(cell, free, kv_tok)
    avg_in, avg_ctx = _average_lengths(cell)
    conc_avg = kv_tokens // _tokens_rounded(max(1, avg_ctx), tpb)
    kv_use = (cell.max_batch_size * _tokens_rounded(max(1, avg_ctx), tpb)) / kv_tokens if kv_tokens else float("inf")
    read_b1 = _decode_read_bytes(cell, arch, 1)
    kv_batch = max(1, min(cell.max_batch_size, conc_avg))
    read_kvb = _decode_read_bytes(cell, arch, kv_batch)
    mfu = spec.traffic.mfu if spec.traffic else 0.5
    return CellPlan(
        cell_id=cell.id,
        gpu=gpu.name,
        weights=q.weights,
        kv_cache=q.kv_cache,
        tp=cell.tp,
        pp=cell.pp,
        params=arch.params,
        params_source=arch.params_source,
        weight_bytes_total=w_total,
        weight_bytes_per_gpu=w_gpu,
        activation_bytes=act,
        logits_bytes=logits,
        cuda_graph_bytes=graphs,
        reserve_bytes=RESERVE_BYTES,
        gpu_memory_bytes=gpu.memory_bytes,
        free_bytes=free,
        kv_budget_bytes=budget,
        kv_bytes_per_token=kv_tok,
        kv_tokens=kv_tokens,
        avg_context=avg_ctx,
        max_concurrency_at_max_seq=kv_tokens // _tokens_rounded(cell.max_seq_len, tpb),
        max_concurrency_at_avg=conc_avg,
        kv_use_at_max_batch=kv_use,
        tpot_floor_b1_ms=tpot_floor_ms(read_b1, kv_tok * cell.pp * avg_ctx, gpu.hbm_bytes_s),
        tpot_floor_kv_batch_ms=tpot_floor_ms(read_kvb, kv_tok * cell.pp * avg_ctx * kv_batch, gpu.hbm_bytes_s),
        kv_batch=kv_batch,
        prefill_ms_avg_input=prefill_ms(arch.active_params / cell.tp, avg_in, gpu.peak_flops(q.weights), mfu),
        mfu=mfu,
        avg_input=avg_in,
        decode_read_bytes_per_gpu=read_b1 / cell.pp,
    )


def _check_fit(plan: CellPlan, cell: Cell) -> None:
    """Add the memory-fit error (weights, one max_seq_len request) or the KV-pressure warning."""
    gpu = cell.gpu
    if plan.free_bytes <= 0:
        plan.errors.append(
            f"weights ({plan.weight_bytes_per_gpu / 1e9:.1f} GB/GPU) and runtime buffers do not fit {gpu.name} "
            f"({gpu.memory_gb:.0f} GB); use a larger TP, a smaller format or a bigger GPU"
        )
    elif plan.max_concurrency_at_max_seq < 1:
        request = plan.kv_bytes_per_token * _tokens_rounded(cell.max_seq_len, cell.spec.build.tokens_per_block)
        plan.errors.append(
            f"the KV budget ({plan.kv_budget_bytes / 1e9:.2f} GB) cannot hold one {cell.max_seq_len}-token request "
            f"({request / 1e9:.2f} GB); lower max_seq_len or raise TP"
        )
    elif plan.kv_use_at_max_batch > KV_WARN_FRACTION:
        plan.warnings.append(
            f"a full batch of {cell.max_batch_size} at {plan.avg_context} tokens uses "
            f"{plan.kv_use_at_max_batch:.0%} of the KV budget "
            f"(>{KV_WARN_FRACTION:.0%} risks preemption); lower max_batch_size or add GPUs"
        )


def _batch_at_sla(plan: CellPlan, cell: Cell, target: float, read_b1: float) -> int:
    """Largest batch whose TPOT floor meets the SLO, within the engine's max batch and the KV budget."""
    per_req = plan.kv_bytes_per_token * cell.pp * plan.avg_context
    b_sla = int((target / 1000.0 * cell.gpu.hbm_bytes_s - read_b1) // per_req) if per_req else cell.max_batch_size
    return max(1, min(b_sla, cell.max_batch_size, max(1, plan.max_concurrency_at_avg)))


def _size_fleet(plan: CellPlan, cell: Cell, traffic: Traffic, tpot_at_batch: float, b_sla: int) -> None:
    """Record the expected tokens per verify step and the floor's fleet: each instance runs ``b_sla`` requests at
    the floor's TPOT for that batch (not at the SLO: a batch-capped cell runs well below it)."""
    spec_k = traffic.speculative
    tps = speculative_tokens(spec_k.acceptance_rate, spec_k.draft_len) if spec_k else 1.0
    plan.speculative_tokens = tps if spec_k else None
    f: Fleet = fleet_size(
        peak_rps=traffic.peak_rps,
        avg_output_tokens=traffic.output_tokens.mean,
        tpot_target_ms=tpot_at_batch,
        batch_at_sla=b_sla,
        gpus_per_instance=cell.tp * cell.pp,
        utilization=traffic.target_utilization,
        headroom=traffic.burst_headroom,
        kv_max_concurrency=plan.max_concurrency_at_avg,
        tokens_per_step=tps,
    )
    full = max(1, ceil_clean(f.raw_instances)) * f.gpus_per_instance  # no utilization target, no headroom
    plan.fleet = {
        **asdict(f),
        "raw_gpus": f.raw_gpus,
        "total_gpus": f.total_gpus,
        "gpus_at_full_load": full,
        "utilization": traffic.target_utilization,
        "headroom": traffic.burst_headroom,
    }


def _apply_tpot_slo(plan: CellPlan, cell: Cell, arch: ModelArch) -> None:
    """Check the TPOT SLO against the batch-1 floor; when it can be met, size the batch and fleet at the SLO."""
    spec = cell.spec
    target = _target(spec.slo.tpot_ms)
    if target is None:
        return
    plan.tpot_target_ms = target
    if target < plan.tpot_floor_b1_ms:
        plan.errors.append(
            f"TPOT SLO {target:g} ms is below the {plan.tpot_floor_b1_ms:.1f} ms floor of this GPU "
            f"({cell.gpu.name}, {spec.quantization.weights}, TP{cell.tp})"
        )
    elif plan.free_bytes > 0:
        b_sla = _batch_at_sla(plan, cell, target, _decode_read_bytes(cell, arch, 1))
        plan.batch_at_sla = b_sla
        at = min(target, floor_tpot_ms_at(plan, cell, arch, b_sla))
        plan.tpot_floor_at_sla_ms = at
        plan.tok_s_per_gpu_at_sla = 1000.0 / at * b_sla / (cell.tp * cell.pp)
        if spec.traffic is not None:
            _size_fleet(plan, cell, spec.traffic, at, b_sla)


def _check_ttft(plan: CellPlan, cell: Cell) -> None:
    """Warn when the estimated prefill of the mean prompt alone exceeds the TTFT SLO."""
    ttft = _target(cell.spec.slo.ttft_ms)
    if ttft is not None and plan.prefill_ms_avg_input > ttft:
        plan.warnings.append(
            f"estimated prefill of {plan.avg_input} tokens ({plan.prefill_ms_avg_input:.0f} ms at {plan.mfu:.0%} "
            f"MFU) exceeds the TTFT SLO {ttft:g} ms before any queueing"
        )


def plan_cell(cell: Cell, arch: ModelArch) -> CellPlan:
    """Plan one matrix cell: its numbers, then the fit, TPOT-SLO, feature and TTFT checks, in that order."""
    plan = _base_plan(cell, arch)
    _check_fit(plan, cell)
    _apply_tpot_slo(plan, cell, arch)
    plan.features = feature_plan(
        cell,
        tpot_b1_ms=plan.tpot_floor_b1_ms,
        avg_context=plan.avg_context,
        left_after_kv_bytes=max(0.0, plan.free_bytes) - plan.kv_budget_bytes,
        arch=arch,
    )
    _check_ttft(plan, cell)
    return plan


def moe_read(arch: ModelArch) -> str:
    """The explain clause for a mixture of experts: only the experts the batch is routed to are read."""
    if not arch.num_experts:
        return ""
    e, k = arch.num_experts, arch.experts_per_token
    return f" − unrouted experts (per MoE layer {k} of {e} at batch 1, E·(1 − (1 − k/E)^batch) at a batch)"


def explain(plan: CellPlan, arch: ModelArch) -> str:
    """The arithmetic behind one plan, line by line."""
    g = 1e9
    hbm = lookup_gpu(plan.gpu).hbm_bytes_s
    layers = -(-arch.num_layers // plan.pp)
    kv_heads = max(1, -(-arch.num_kv_heads // plan.tp))
    kv_dtype_b = plan.kv_bytes_per_token / (2 * layers * kv_heads * arch.head_dim)
    lines = [
        f"cell {plan.cell_id} ({plan.gpu}, weights {plan.weights}, KV {plan.kv_cache}, TP{plan.tp} PP{plan.pp})",
        f"  params = {plan.params / 1e9:.3f} B ({plan.params_source})",
        f"  weights = Linear params × bytes/param + (embed + lm_head + norms) × dtype bytes = "
        f"{plan.weight_bytes_total / g:.2f} GB; per GPU ÷ {plan.tp * plan.pp} = {plan.weight_bytes_per_gpu / g:.2f} GB",
        f"  KV/token/rank = 2 × {-(-arch.num_layers // plan.pp)} layers × "
        f"{max(1, -(-arch.num_kv_heads // plan.tp))} KV heads × {arch.head_dim} head dim × "
        f"{kv_dtype_b:g} B"
        f" = {plan.kv_bytes_per_token:,.0f} B",
        f"  activations = max_num_tokens × (8·hidden + 3·intermediate/TP) × 2 B = {plan.activation_bytes / g:.2f} GB",
        f"  logits = max_batch × vocab × 4 B = {plan.logits_bytes / g:.2f} GB; CUDA graphs = "
        f"{plan.cuda_graph_bytes / g:.2f} GB; reserve = {plan.reserve_bytes / g:.2f} GB",
        f"  free = {plan.gpu_memory_bytes / g:.1f} − {plan.weight_bytes_per_gpu / g:.2f} − "
        f"{plan.activation_bytes / g:.2f} − {plan.logits_bytes / g:.2f} − {plan.cuda_graph_bytes / g:.2f} − "
        f"{plan.reserve_bytes / g:.2f} = {plan.free_bytes / g:.2f} GB",
        f"  KV budget = free × fraction = {plan.kv_budget_bytes / g:.2f} GB → {plan.kv_tokens:,} tokens",
        f"  concurrency = KV tokens ÷ block-rounded context: {plan.max_concurrency_at_max_seq} at max_seq_len, "
        f"{plan.max_concurrency_at_avg} at {plan.avg_context} tokens",
        f"  weights read per decode step = weights − input embedding table + looked-up rows"
        f"{' (table tied to lm_head: read in full)' if arch.tie_embeddings else ''}"
        f"{moe_read(arch)} = "
        f"{plan.decode_read_bytes_per_gpu * plan.pp / g:.2f} GB per TP rank",
        f"  TPOT floor (batch 1) = (weights read per TP rank + KV of {plan.avg_context} tokens per TP rank) ÷ HBM = "
        f"({plan.decode_read_bytes_per_gpu * plan.pp / g:.2f} GB + "
        f"{plan.kv_bytes_per_token * plan.pp * plan.avg_context / g:.3f} GB) ÷ {hbm / 1e12:.2f} TB/s = "
        f"{plan.tpot_floor_b1_ms:.2f} ms",
        f"  TPOT floor (batch {plan.kv_batch}) = {plan.tpot_floor_kv_batch_ms:.2f} ms",
        f"  prefill({plan.avg_input} tokens) = 2 × active params/TP × tokens ÷ (peak FLOP/s × MFU {plan.mfu:.0%}) = "
        f"{plan.prefill_ms_avg_input:.1f} ms",
    ]
    if plan.batch_at_sla is not None:
        lines.append(
            f"  batch at TPOT SLA {plan.tpot_target_ms:g} ms = {plan.batch_at_sla} (floor TPOT there "
            f"{plan.tpot_floor_at_sla_ms:.2f} ms); tok/s per GPU = "
            f"1000/{plan.tpot_floor_at_sla_ms:.2f} × {plan.batch_at_sla} ÷ {plan.tp * plan.pp} = "
            f"{plan.tok_s_per_gpu_at_sla:,.0f}"
        )
    if plan.fleet:
        f = plan.fleet
        lines.append(f"  floor fleet: {fleet_arithmetic(f)}")
    lines += estimate_explain(plan)
    if plan.speculative_tokens:
        lines.append(f"  speculative: E[tokens/verify] = (1 − α^(K+1)) / (1 − α) = {plan.speculative_tokens:.2f}")
    lines += feature_explain(plan.features)
    return "\n".join(lines)


def estimate_explain(plan: CellPlan) -> list[str]:
    """Where the silicon estimate's figures came from (AIConfigurator's measured database), line by line."""
    e = plan.estimate
    if e is None:
        why = plan.no_estimate or "--estimator floor"
        return [f"  silicon estimate: none ({why}); every figure above is the roofline floor"]
    b1, at = e["batch_1"], e["at_batch"]
    batches = sorted({c["batch"] for c in e["curve"]})
    ctx = sorted({c["ctx_tokens"] for c in e["curve"] if c.get("ctx_tokens")})
    lines = [
        f"  silicon estimate: {e['estimator']}, database {e['database']} measured on {e['system']}, "
        f"ISL {e['isl']} / OSL {e['osl']}, {len(e['curve'])} points: batches {batches[0]}–{batches[-1]}"
        + (f", context tokens per step {ctx[0]}–{ctx[-1]}" if ctx else ""),
        f"    batch 1: TTFT {b1['ttft_ms']:.1f} ms (floor prefill {plan.prefill_ms_avg_input:.1f} ms), "
        f"TPOT {b1['tpot_ms']:.2f} ms (floor {plan.tpot_floor_b1_ms:.2f} ms, "
        f"×{b1['tpot_ms'] / plan.tpot_floor_b1_ms:.1f})",
    ]
    if e.get("modes"):
        lines.append(f"    quant modes: {modes_text(e['modes'])} (from the checkpoint's quantization_config)")
    if at:
        floor = e["floor_tpot_at_batch_ms"]
        per_step = f", {at['ctx_tokens']} context tokens per step" if at.get("ctx_tokens") else ""
        lines.append(
            f"    largest batch ≤ {e['batch_cap']} (engine max batch, KV concurrency) meeting the SLOs: {at['batch']}"
            f"{per_step}: "
            f"TTFT {at['ttft_ms']:.1f} ms, TPOT {at['tpot_ms']:.2f} ms "
            f"(floor {floor:.2f} ms, ×{at['tpot_ms'] / floor:.1f}), "
            f"{at['tok_s_per_gpu']:,.0f} tok/s per GPU, {at['memory_gb']:.1f} GB"
        )
    if plan.fleet_estimate:
        f = plan.fleet_estimate
        lines.append(f"    estimated fleet (batch {f['batch_at_sla']}): {fleet_arithmetic(f)}")
    return lines


def modes_text(modes: dict[str, str]) -> str:
    """AIConfigurator's quant modes in words: "gemm fp8_static, fmha fp8, KV fp8"."""
    names = (("gemm", "gemm"), ("fmha", "fmha"), ("kvcache", "KV"))
    return ", ".join(f"{label} {modes[k]}" for k, label in names if k in modes)
