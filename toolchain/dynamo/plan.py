"""Size a Dynamo deployment's pools from the SLOs and the traffic, next to the aggregated fleet at the same SLOs.

Per worker (one instance of TP GPUs), with P active parameters, F peak FLOP/s, MFU, W the weight bytes one
decode step reads per rank, kv the KV bytes per token per rank, HBM the bandwidth (docs/dynamo.md, "Plan"):

- prefill(n)   = 2·P/TP·n ÷ (F·MFU)                       compute-bound: sets TTFT
- step(B)      = (W + B·ctx·kv) ÷ HBM                     bandwidth-bound: sets TPOT at batch B
- chunk        = prefill(max_num_tokens)                  what one chunked-prefill step adds to a decode step
- KV/request   = 2·layers·KV heads·head dim·KV bytes·n    the whole model's cache of an n-token prompt
- transfer     = KV/request ÷ (link GB/s·min(TP_prefill, TP_decode))   each rank sends its shard on its own NIC

Disaggregated: a decode worker runs the largest batch with step(B) ≤ TPOT SLO (within max batch and its KV
budget) and serves B/(step(B)·out) req/s; a prefill worker serves 1/prefill(in) req/s; TTFT ≈ prefill(in) +
transfer. Aggregated: every decode step may carry a prefill chunk, so P99 TPOT ≈ step(B) + chunk and the batch
at SLA is the largest with step(B) + chunk ≤ TPOT SLO; a worker spends r·prefill(in) of each second on prefill,
so it serves r = X/(1 + X·prefill(in)) req/s where X = B/(step(B)·out). Each pool is rounded up after dividing
by the target utilization and multiplying by the burst headroom, as ``toolchain plan`` does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from toolchain.errors import PlanError
from toolchain.planning import bytes as B
from toolchain.planning import estimate as E
from toolchain.planning.perf import ceil_clean
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.specs.arch import ModelArch
from toolchain.specs.dynamo import DynamoServing, Pool
from toolchain.specs.matrix import Cell


@dataclass
class PoolPlan:
    role: str  # workers | prefill | decode
    gpu: str
    tp: int
    replicas: int
    replicas_source: str  # "spec" or "plan"
    gpus: int
    prefill_ms: float  # of the mean prompt on one worker
    step_ms: float  # one decode step at ``batch``
    batch: int  # decode batch at the TPOT SLO (aggregated and decode pools)
    kv_tokens: int  # KV budget of one worker
    kv_bytes_per_token: float  # per rank
    rps_per_worker: float
    weight_read_bytes: float  # per rank per decode step
    raw_workers: float
    slo_miss: str | None = None  # a pool the spec fixed that cannot meet the TPOT SLO
    source: str = "floor"  # what timed it: "floor" (the roofline) or the silicon estimate's provenance
    # the decode step as a line over active KV tokens (what the mocker interpolates): step ≈ base + tokens × slope
    step_base_ms: float = 0.0
    step_ms_per_kv_token: float = 0.0
    weight_bytes_per_gpu: float = 0.0  # every weight one rank holds (host memory while it loads them)


@dataclass
class DynamoPlan:
    cell_id: str
    mode: str
    avg_input: int
    avg_output: int
    peak_rps: float | None
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    kv_bytes_per_request: float  # whole model, mean prompt
    kv_dtype_bytes: float
    link: str
    link_gb_s: float
    transfer_ms: float
    chunk_tokens: int
    chunk_ms: float
    pools: list[PoolPlan]
    aggregated: PoolPlan  # the aggregated fleet at the same SLOs, for comparison
    ttft_ms: float  # estimated, without queueing
    tpot_p99_ms: float
    aggregated_ttft_ms: float
    aggregated_tpot_p99_ms: float
    verdict: str
    pays: bool
    notes: list[str] = field(default_factory=list)
    estimator: str = "floor"  # "floor", or the silicon estimate's provenance when every pool was timed by it
    floor_gpus: int | None = None  # the roofline floor's total for the same cell (set beside a silicon plan)

    @property
    def total_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    def pool(self, role: str) -> PoolPlan:
        return next(p for p in self.pools if p.role == role)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_gpus"] = self.total_gpus
        return d


def _target(p: Any) -> float | None:
    value: float | None = p.p99 or p.p90 or p.p50
    return value


def pool_cell(cell: Cell, pool: Pool) -> Cell:
    """The cell one pool's workers run: the pool's GPU and TP, the cell's shapes."""
    from toolchain.hardware.catalog import lookup_gpu

    return dataclasses.replace(
        cell, gpu=lookup_gpu(pool.gpu) if pool.gpu else cell.gpu, tp=pool.tp if pool.tp is not None else cell.tp
    )


def _fit(role: str, cell: Cell, plan: CellPlan) -> None:
    """A pool whose worker cannot hold the weights or one request is a plan error, named by pool."""
    fit = [e for e in plan.errors if "do not fit" in e or "cannot hold one" in e]
    if fit:
        raise PlanError(
            f"dynamo.{role}: {cell.gpu.name} TP{cell.tp}: {fit[0].split('; ')[0]}",
            f"raise dynamo.{role}.tp, pick a bigger dynamo.{role}.gpu, or a smaller weight format",
        )


def _step_ms(plan: CellPlan, batch: int, cell: Cell) -> float:
    read = plan.decode_read_bytes_per_gpu * cell.pp
    return (read + batch * plan.avg_context * plan.kv_bytes_per_token * cell.pp) / cell.gpu.hbm_bytes_s * 1000.0


def _batch_within(plan: CellPlan, cell: Cell, budget_ms: float) -> int:
    """Largest decode batch whose step fits ``budget_ms`` (at least 1), within max batch and the KV budget."""
    read = plan.decode_read_bytes_per_gpu * cell.pp
    per_req = plan.avg_context * plan.kv_bytes_per_token * cell.pp
    b = int((budget_ms / 1000.0 * cell.gpu.hbm_bytes_s - read) // per_req) if per_req else cell.max_batch_size
    return max(1, min(b, cell.max_batch_size, max(1, plan.max_concurrency_at_avg)))


def _workers(raw: float, pool: Pool, util: float, headroom: float) -> tuple[int, str]:
    if isinstance(pool.replicas, int):
        return pool.replicas, "spec"
    return max(1, ceil_clean(raw / util * headroom)), "plan"


def _pool(
    role: str,
    cell: Cell,
    arch: ModelArch,
    pool: Pool,
    *,
    budget_ms: float | None,
    chunk_ms: float,
    traffic: Any,
    silicon: Silicon | None = None,
) -> tuple[PoolPlan, CellPlan]:
    pc = pool_cell(cell, pool)
    plan = plan_cell(pc, arch)
    _fit(role, pc, plan)
    if silicon is not None:
        est = silicon.pool(role, pc, plan, budget_ms=budget_ms, traffic=traffic, fixed=pool.replicas != "plan")
        if isinstance(est, PoolPlan):
            n, source = _workers(est.raw_workers, pool, *_util(traffic))
            return dataclasses.replace(est, replicas=n, replicas_source=source, gpus=n * pc.tp * pc.pp), plan
        silicon.misses.append(f"dynamo.{role}: {est}")  # no data: this pool is timed by the floor, visibly
    slo_miss: str | None = None
    prefill_s = plan.prefill_ms_avg_input / 1000.0
    avg_out = traffic.output_tokens.mean if traffic else max(1, plan.avg_context - plan.avg_input)
    batch, step = 0, 0.0
    if role != "prefill":
        if budget_ms is not None and budget_ms - chunk_ms <= _step_ms(plan, 1, pc):
            need = "with a prefill chunk in the step " if chunk_ms else ""
            miss = (
                f"dynamo.{role}: a decode step {need}takes {_step_ms(plan, 1, pc) + chunk_ms:.1f} ms at batch 1 on "
                f"{pc.gpu.name} TP{pc.tp}, over the TPOT SLO {budget_ms:g} ms"
            )
            if pool.replicas == "plan":  # nothing to size the pool by
                raise PlanError(
                    miss,
                    "raise the TP, use a faster GPU or weight format, relax slo.tpot_ms"
                    + (", or disaggregate (mode: disaggregated)" if chunk_ms else ""),
                )
            slo_miss, budget_ms = miss, None  # the spec fixed the pool: size its batch by memory, say so
        batch = _batch_within(plan, pc, (budget_ms - chunk_ms) if budget_ms is not None else 1e12)
        step = _step_ms(plan, batch, pc)
    if role == "prefill":
        rps = 1.0 / prefill_s
    else:
        x = batch / (step / 1000.0 * avg_out)
        rps = x / (1.0 + x * prefill_s) if role == "workers" else x
    peak = traffic.peak_rps if traffic else None
    raw = peak / rps if peak else 0.0
    n, source = _workers(raw, pool, *_util(traffic))
    return (
        PoolPlan(
            role=role,
            gpu=pc.gpu.name,
            tp=pc.tp,
            replicas=n,
            replicas_source=source,
            gpus=n * pc.tp * pc.pp,
            prefill_ms=plan.prefill_ms_avg_input,
            step_ms=step,
            batch=batch,
            kv_tokens=plan.kv_tokens,
            kv_bytes_per_token=plan.kv_bytes_per_token,
            rps_per_worker=rps,
            weight_read_bytes=plan.decode_read_bytes_per_gpu * pc.pp,
            weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
            raw_workers=raw,
            slo_miss=slo_miss,
            step_base_ms=plan.decode_read_bytes_per_gpu * pc.pp / pc.gpu.hbm_bytes_s * 1000.0,
            step_ms_per_kv_token=plan.kv_bytes_per_token * pc.pp / pc.gpu.hbm_bytes_s * 1000.0,
        ),
        plan,
    )


def _util(traffic: Any) -> tuple[float, float]:
    return (traffic.target_utilization, traffic.burst_headroom) if traffic else (1.0, 1.0)


@dataclass
class Silicon:
    """Times pools with NVIDIA AIConfigurator's measured database (toolchain.planning.estimate): prefill workers by
    its prefill-only estimate (``static_ctx``, batch 1, the mean prompt), decode workers by its decode-only estimate
    (``static_gen``) at the largest batch of the ladder that meets the TPOT SLO, aggregated workers by its
    in-flight-batching estimate (``agg``: mixed steps, so its TPOT already carries the prefill chunks). A pool the
    database cannot time is timed by the floor, and ``misses`` says so."""

    session: E.Session
    arch: ModelArch
    misses: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def _source(self, e: E.Estimate, system: str, mode: str) -> str:
        src = f"{self.session.estimator} ({e.database} on {system}, {mode})"
        if src not in self.sources:
            self.sources.append(src)
        return src

    def pool(
        self, role: str, pc: Cell, plan: CellPlan, *, budget_ms: float | None, traffic: Any, fixed: bool
    ) -> PoolPlan | str:
        """The pool timed by the database (replicas left to the caller), or why the database cannot time it."""
        q = pc.spec.quantization
        why = E.unsupported(pc.gpu.name, q.weights, self.arch, pc.pp)
        if why is not None:
            return why
        system = E.SYSTEMS[pc.gpu.name]
        _isl, osl = E.lengths(pc)

        def ask(mode: str, b: int) -> E.Estimate | str:
            return self.session.ask(E.query(pc, b, mode))

        ctx = ask("static_ctx", 1)
        if isinstance(ctx, str):
            return f"AIConfigurator: {ctx}"
        peak = traffic.peak_rps if traffic else None
        base: dict[str, Any] = {
            "role": role,
            "gpu": pc.gpu.name,
            "tp": pc.tp,
            "replicas": 0,
            "replicas_source": "plan",
            "gpus": 0,
            "kv_tokens": plan.kv_tokens,
            "kv_bytes_per_token": plan.kv_bytes_per_token,
            "weight_read_bytes": plan.decode_read_bytes_per_gpu * pc.pp,
            "weight_bytes_per_gpu": plan.weight_bytes_per_gpu,
        }
        if role == "prefill":
            rps = 1000.0 / ctx.ttft_ms
            src = self._source(ctx, system, "static_ctx")
            return PoolPlan(
                **base, prefill_ms=ctx.ttft_ms, step_ms=0.0, batch=0, rps_per_worker=rps,
                raw_workers=peak / rps if peak else 0.0, source=src,
            )  # fmt: skip
        mode = "static_gen" if role == "decode" else "agg"
        cap = max(1, min(pc.max_batch_size, plan.max_concurrency_at_avg))
        curve: list[E.Estimate] = []
        for b in E.ladder(cap):
            e = ask(mode, b)
            if isinstance(e, str):
                if not curve:
                    return f"AIConfigurator: {e}"
                break  # a larger batch has no more data than a smaller one
            curve.append(e)
        ttft_t = _target(pc.spec.slo.ttft_ms) if role == "workers" else None
        at, _why = E.largest_meeting(curve, budget_ms, ttft_t)
        src = self._source(curve[0], system, mode)
        slo_miss = None
        if at is None:
            b1 = curve[0]
            miss = (
                f"dynamo.{role}: a decode step takes {b1.tpot_ms:.1f} ms at batch 1 on {pc.gpu.name} TP{pc.tp} "
                f"({src}), over the TPOT SLO {budget_ms:g} ms"
            )
            if not fixed:  # nothing to size the pool by
                raise PlanError(
                    miss,
                    "raise the TP, use a faster GPU or weight format, relax slo.tpot_ms"
                    + (", or disaggregate (mode: disaggregated)" if role == "workers" else ""),
                )
            slo_miss, at = miss, curve[-1]  # the spec fixed the pool: its largest batch within memory, said so
        avg_out = traffic.output_tokens.mean if traffic else osl
        rps = at.tok_s / avg_out
        ctx_tokens = max(1, plan.avg_context)
        b1 = curve[0]
        slope = (at.tpot_ms - b1.tpot_ms) / ((at.batch - b1.batch) * ctx_tokens) if at.batch > b1.batch else 0.0
        return PoolPlan(
            **base,
            prefill_ms=at.ttft_ms if role == "workers" else ctx.ttft_ms,
            step_ms=at.tpot_ms,
            batch=at.batch,
            rps_per_worker=rps,
            raw_workers=peak / rps if peak else 0.0,
            slo_miss=slo_miss,
            source=src,
            step_base_ms=max(0.0, b1.tpot_ms - slope * ctx_tokens * b1.batch),
            step_ms_per_kv_token=max(0.0, slope),
        )


def plan_dynamo(cell: Cell, arch: ModelArch, silicon: Silicon | None = None) -> DynamoPlan:
    """The Dynamo pools of ``cell`` (its spec has a ``dynamo`` block) and the aggregated fleet beside them; timed
    by the roofline floor, or with ``silicon`` by NVIDIA AIConfigurator's measured database (pools it cannot time
    keep the floor, and a note says so)."""
    spec = cell.spec
    d: DynamoServing | None = spec.dynamo
    if d is None:
        raise PlanError("the spec has no dynamo block", "add dynamo: {mode: disaggregated} to the spec")
    traffic = spec.traffic
    ttft, tpot = _target(spec.slo.ttft_ms), _target(spec.slo.tpot_ms)
    q = spec.quantization
    kv_b = B.kv_dtype_bytes(q.kv_cache, spec.model.dtype)
    base = plan_cell(cell, arch)
    avg_in = base.avg_input
    avg_out = traffic.output_tokens.mean if traffic else max(1, base.avg_context - avg_in)
    per_request = B.kv_bytes_per_request(arch, kv_b, avg_in)
    chunk_tokens = min(spec.build.max_num_tokens, cell.max_input_len) if spec.serving.enable_chunked_prefill else 0
    agg_cell = pool_cell(cell, d.workers if not d.disaggregated else d.decode)
    agg_base = plan_cell(agg_cell, arch)
    chunk_ms = agg_base.prefill_ms_avg_input / max(1, avg_in) * chunk_tokens
    if not spec.serving.enable_chunked_prefill:  # a whole prompt's prefill stalls the batch
        chunk_ms = agg_base.prefill_ms_avg_input
    if d.disaggregated:
        agg, _ = _aggregated_view(cell, arch, d, tpot, chunk_ms, traffic, silicon)
    else:
        agg, _ = _pool(
            "workers", cell, arch, d.workers, budget_ms=tpot, chunk_ms=chunk_ms, traffic=traffic, silicon=silicon
        )
    agg_ttft = agg.prefill_ms
    # the silicon estimate of an aggregated worker is of mixed steps: its TPOT already carries the prefill chunks
    agg_tpot = agg.step_ms + (chunk_ms if agg.source == "floor" else 0.0)
    link_gb_s = d.link.gb_s
    common: dict[str, Any] = {
        "cell_id": cell.id,
        "mode": d.mode,
        "avg_input": avg_in,
        "avg_output": avg_out,
        "peak_rps": traffic.peak_rps if traffic else None,
        "ttft_slo_ms": ttft,
        "tpot_slo_ms": tpot,
        "kv_bytes_per_request": per_request,
        "kv_dtype_bytes": kv_b,
        "link": d.link.kind,
        "link_gb_s": link_gb_s,
        "chunk_tokens": chunk_tokens,
        "chunk_ms": chunk_ms,
        "aggregated": agg,
        "aggregated_ttft_ms": agg_ttft,
        "aggregated_tpot_p99_ms": agg_tpot,
    }
    notes: list[str] = []
    if agg.slo_miss and not d.disaggregated:
        notes.append(agg.slo_miss)
    if not d.disaggregated:
        verdict, pays = _aggregated_verdict(agg, tpot)
        return _timed(
            DynamoPlan(
                **common,
                transfer_ms=0.0,
                pools=[agg],
                ttft_ms=agg_ttft,
                tpot_p99_ms=agg_tpot,
                verdict=verdict,
                pays=pays,
                notes=notes,
            ),
            silicon,
        )
    pre, pre_plan = _pool(
        "prefill", cell, arch, d.prefill, budget_ms=None, chunk_ms=0.0, traffic=traffic, silicon=silicon
    )
    dec, _ = _pool("decode", cell, arch, d.decode, budget_ms=tpot, chunk_ms=0.0, traffic=traffic, silicon=silicon)
    notes += [m for m in (dec.slo_miss,) if m]
    lanes = min(pre.tp, dec.tp)
    transfer_ms = per_request / (link_gb_s * 1e9 * lanes) * 1000.0
    ttft_est = pre.prefill_ms + transfer_ms
    if ttft is not None and transfer_ms >= ttft:
        raise PlanError(
            f"moving the KV of a {avg_in}-token prompt ({per_request / 1e9:.2f} GB) over {d.link.kind} at "
            f"{link_gb_s:g} GB/s × {lanes} takes {transfer_ms:.0f} ms, over the whole TTFT SLO {ttft:g} ms",
            "use a faster dynamo.link (NVLink, InfiniBand), an FP8 KV cache, or mode: aggregated",
        )
    if ttft is not None and ttft_est > ttft:
        notes.append(
            f"prefill ({pre.prefill_ms:.0f} ms) + KV transfer ({transfer_ms:.0f} ms) = {ttft_est:.0f} ms exceeds the "
            f"TTFT SLO {ttft:g} ms before any queueing"
        )
    verdict, pays = _verdict(pre, dec, agg, tpot, agg_tpot, transfer_ms)
    if agg.replicas == 0 and tpot is not None and chunk_tokens:
        per_token = chunk_ms / chunk_tokens
        fits = int((tpot - agg.step_ms) / per_token) if per_token else 0
        notes.append(
            f"an aggregated fleet needs prefill chunks of at most {max(0, fits)} tokens (build.max_num_tokens) to "
            f"keep a mixed step under {tpot:g} ms"
        )
    return _timed(
        DynamoPlan(
            **common,
            transfer_ms=transfer_ms,
            pools=[pre, dec],
            ttft_ms=ttft_est,
            tpot_p99_ms=dec.step_ms,
            verdict=verdict,
            pays=pays,
            notes=[*notes, f"prefill worker KV budget: {pre_plan.kv_tokens:,} tokens"],
        ),
        silicon,
    )


def _timed(p: DynamoPlan, silicon: Silicon | None) -> DynamoPlan:
    """Name what timed the plan, and every pool the silicon estimate could not time."""
    if silicon is None:
        return p
    timed = [pool for pool in p.pools if pool.source != "floor"]
    if timed:
        # "aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on h100_sxm, static_ctx)" -> its part before the mode, once
        p.estimator = "; ".join(dict.fromkeys(pool.source.rsplit(", ", 1)[0] + ")" for pool in timed))
        if len(timed) < len(p.pools):
            p.estimator += " and the roofline floor"
    p.notes += [f"no silicon estimate for {m}; that pool is timed by the roofline floor" for m in silicon.misses]
    return p


def _aggregated_view(
    cell: Cell,
    arch: ModelArch,
    d: DynamoServing,
    tpot: float | None,
    chunk_ms: float,
    traffic: Any,
    silicon: Silicon | None = None,
) -> tuple[PoolPlan, CellPlan | None]:
    """The aggregated fleet of a disaggregated spec (decode pool's GPU and TP); None-sized when it cannot meet
    the TPOT SLO at all (a prefill chunk alone breaks it)."""
    pool = Pool(gpu=d.decode.gpu, tp=d.decode.tp)
    try:
        return _pool("workers", cell, arch, pool, budget_ms=tpot, chunk_ms=chunk_ms, traffic=traffic, silicon=silicon)
    except PlanError:
        pc = pool_cell(cell, pool)
        p = plan_cell(pc, arch)
        step = _step_ms(p, 1, pc)
        return (
            PoolPlan(
                "workers",
                pc.gpu.name,
                pc.tp,
                0,
                "cannot meet the TPOT SLO",
                0,
                p.prefill_ms_avg_input,
                step,
                1,
                p.kv_tokens,
                p.kv_bytes_per_token,
                0.0,
                p.decode_read_bytes_per_gpu * pc.pp,
                math.inf,
            ),
            None,
        )


def _aggregated_verdict(agg: PoolPlan, tpot: float | None) -> tuple[str, bool]:
    return (
        f"aggregated: {agg.replicas} worker(s) × TP{agg.tp} = {agg.gpus} GPUs; every decode step may carry a prefill "
        "chunk (TPOT P99 ≈ step + chunk)",
        False,
    )


def _verdict(
    pre: PoolPlan, dec: PoolPlan, agg: PoolPlan, tpot: float | None, agg_tpot: float, transfer_ms: float
) -> tuple[str, bool]:
    """Whether disaggregation pays at these SLOs and this traffic, in one sentence with the numbers."""
    disagg = pre.gpus + dec.gpus
    if agg.replicas == 0:
        return (
            f"disaggregation pays: aggregated workers cannot meet the TPOT SLO {tpot:g} ms (one prefill chunk makes "
            f"a step {agg_tpot:.1f} ms); disaggregated needs {disagg} GPUs",
            True,
        )
    if disagg < agg.gpus:
        return (
            f"disaggregation pays: {disagg} GPUs ({pre.gpus} prefill + {dec.gpus} decode) against {agg.gpus} "
            f"aggregated at the same SLOs; decode steps carry no prefill chunk (TPOT P99 {dec.step_ms:.1f} vs "
            f"{agg_tpot:.1f} ms) for {transfer_ms:.1f} ms of KV transfer per request",
            True,
        )
    return (
        f"disaggregation does not pay here: {disagg} GPUs ({pre.gpus} prefill + {dec.gpus} decode) against "
        f"{agg.gpus} aggregated; it still cuts TPOT P99 from {agg_tpot:.1f} to {dec.step_ms:.1f} ms, at "
        f"{transfer_ms:.1f} ms more TTFT",
        False,
    )


def _explain_silicon(p: DynamoPlan, pool: PoolPlan) -> list[str]:
    out = [f"    timed by {pool.source}"]
    if pool.role == "prefill":
        out.append(f"    prefill({p.avg_input}) = TTFT at batch 1 = {pool.prefill_ms:.1f} ms")
        out.append(f"    req/s per worker = 1000 ÷ {pool.prefill_ms:.1f} = {pool.rps_per_worker:.2f}")
        return out
    budget = f"TPOT SLO {p.tpot_slo_ms:g}" if p.tpot_slo_ms else "no TPOT SLO"
    mixed = " (mixed steps: prefill chunks included)" if pool.role == "workers" else ""
    out.append(f"    B at ({budget}) = {pool.batch} → TPOT {pool.step_ms:.2f} ms{mixed}")
    out.append(
        f"    req/s per worker = the database's {pool.rps_per_worker * p.avg_output:,.0f} tokens/s ÷ {p.avg_output} "
        f"tokens = {pool.rps_per_worker:.2f}"
    )
    return out


def explain(p: DynamoPlan, arch: ModelArch) -> str:
    """The arithmetic behind a Dynamo plan, line by line."""
    g = 1e9
    timed = "the roofline floor" if p.estimator == "floor" else p.estimator
    lines = [
        f"dynamo plan for cell {p.cell_id} ({p.mode}); mean prompt {p.avg_input}, mean output {p.avg_output} tokens",
        f"  timed by {timed}"
        + (f"; the roofline floor needs {p.floor_gpus} GPUs (a lower bound)" if p.floor_gpus is not None else ""),
        f"  KV/request = 2 × {arch.num_layers} layers × {arch.num_kv_heads} KV heads × {arch.head_dim} head dim × "
        f"{p.kv_dtype_bytes:g} B × {p.avg_input} tokens = {p.kv_bytes_per_request:,.0f} B = "
        f"{p.kv_bytes_per_request / g:.2f} GB",
    ]
    if p.mode == "disaggregated":
        pre, dec = p.pool("prefill"), p.pool("decode")
        lanes = min(pre.tp, dec.tp)
        lines.append(
            f"  transfer = KV/request ÷ ({p.link} {p.link_gb_s:g} GB/s × min(TP {pre.tp}, TP {dec.tp}) = {lanes}) "
            f"= {p.transfer_ms:.2f} ms"
        )
    lines.append(
        f"  chunk = prefill({p.chunk_tokens} tokens) = {p.chunk_ms:.2f} ms (rides on an aggregated decode step)"
    )
    said: set[tuple[str, int, float]] = set()  # the floor's prefill formula: once per GPU and TP
    for pool in [*p.pools, *([] if p.mode == "aggregated" else [p.aggregated])]:
        label = pool.role if pool is not p.aggregated or p.mode == "aggregated" else "aggregated (for comparison)"
        lines.append(f"  {label}: {pool.gpu} TP{pool.tp}")
        if pool.source != "floor":
            lines += _explain_silicon(p, pool)
        elif (pool.gpu, pool.tp, pool.prefill_ms) not in said:  # the table has each pool's figure
            said.add((pool.gpu, pool.tp, pool.prefill_ms))
            lines.append(
                f"    prefill({p.avg_input}) = 2 × active params/TP × tokens ÷ (peak FLOP/s × MFU) = "
                f"{pool.prefill_ms:.1f} ms"
            )
        if pool.source == "floor" and pool.role == "prefill":
            lines.append(f"    req/s per worker = 1000 ÷ {pool.prefill_ms:.1f} = {pool.rps_per_worker:.2f}")
        elif pool.source == "floor":
            budget = f"TPOT SLO {p.tpot_slo_ms:g}" if p.tpot_slo_ms else "no TPOT SLO"
            minus = f" − chunk {p.chunk_ms:.1f}" if pool.role == "workers" else ""
            lines.append(
                f"    step(B) = (weights read {pool.weight_read_bytes / g:.2f} GB + B × ctx × KV/token/rank "
                f"{pool.kv_bytes_per_token:,.0f} B) ÷ HBM; B at ({budget}{minus}) = {pool.batch} → step "
                f"{pool.step_ms:.2f} ms"
            )
            x = f"X = {pool.batch} ÷ ({pool.step_ms:.2f} ms × {p.avg_output})"
            if pool.role == "workers":
                lines.append(f"    req/s per worker = X ÷ (1 + X × prefill), {x} → {pool.rps_per_worker:.2f}")
            else:
                lines.append(f"    req/s per worker = {x} = {pool.rps_per_worker:.2f}")
        if pool.replicas_source == "plan":
            lines.append(
                f"    workers = peak {p.peak_rps:g} req/s ÷ {pool.rps_per_worker:.2f} = {pool.raw_workers:.2f} → ÷ "
                f"utilization × headroom, rounded up = {pool.replicas} × TP{pool.tp} = {pool.gpus} GPUs"
            )
        else:
            lines.append(f"    workers = {pool.replicas} ({pool.replicas_source}) × TP{pool.tp} = {pool.gpus} GPUs")
    agg_step = "step + chunk" if p.aggregated.source == "floor" else "mixed step"
    lines.append(
        f"  TTFT ≈ prefill + transfer = {p.ttft_ms:.1f} ms (aggregated {p.aggregated_ttft_ms:.1f} ms); TPOT P99 ≈ "
        f"{p.tpot_p99_ms:.2f} ms (aggregated {agg_step} = {p.aggregated_tpot_p99_ms:.2f} ms); no queueing"
    )
    lines.append(f"  verdict: {p.verdict}")
    lines += [f"  note: {n}" for n in dict.fromkeys(p.notes)]  # each fact once
    return "\n".join(lines)
