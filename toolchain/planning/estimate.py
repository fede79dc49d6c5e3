"""The silicon estimate beside the roofline floor: NVIDIA AIConfigurator's measured per-kernel database.

AIConfigurator (``aiconfigurator`` 0.12.0; its databases are TensorRT-LLM kernels measured per GPU system, e.g.
trtllm 1.3.0rc20 on h100_sxm and h200_sxm) pins packages the toolchain pins differently, so it lives in its own
venv, ``.venv-aic`` (``scripts/setup-aic.sh``), and runs as a subprocess (``aic_worker.py``, one JSON line per
query). Where it has no answer — a GPU, precision or model it does not cover, or the venv is missing under
``--estimator auto`` — the cell keeps the floor only and says why: never a silent floor. Under ``--estimator aic``
each of those is an error (exit 3). Sources: docs/planning-estimates.md.

Per cell the estimate walks the batch ladder (1, 2, 4, … up to the engine's max batch and the KV budget's
concurrency), takes the largest batch whose estimated TPOT and TTFT meet the SLOs, and sizes the fleet from the
tokens per second the database gives at that batch (not from the SLO: a batch-capped cell runs below it).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolchain import settings
from toolchain.errors import EstimateUnavailableError, EstimatorMissingError
from toolchain.planning.perf import Fleet, ceil_clean, fleet_size, speculative_tokens
from toolchain.planning.plan import CellPlan, floor_tpot_ms_at, modes_text
from toolchain.proc import Popen, finish, spawn_pipes
from toolchain.specs.arch import ModelArch
from toolchain.specs.matrix import Cell

Estimator = Literal["auto", "aic", "floor"]
ESTIMATORS: tuple[str, ...] = ("auto", "aic", "floor")
AIC_VERSION = "0.12.0"
REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("aic_worker.py")
QUERY_TIMEOUT_S = 300.0  # the first query of a system loads its database (about 2 s; far more on a loaded host)

# toolchain GPU catalog name -> AIConfigurator system (aiconfigurator_core/systems/*.yaml)
SYSTEMS = {
    "A100-80GB-SXM": "a100_sxm",
    "L4": "l4",
    "L40S": "l40s",
    "H100-SXM": "h100_sxm",
    "H100-PCIe": "h100_pcie",
    "H200-SXM": "h200_sxm",
    "B200": "b200_sxm",
    "GB200": "gb200",
}
# spec weight format -> AIConfigurator GEMM quant mode (aiconfigurator_core/sdk/common.py GEMMQuantMode): given
# explicitly only for the formats whose ModelOpt quant_algo AIConfigurator does not read (``READS_ALGO``)
GEMM_MODES = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "int4_awq": "int4_wo",
    "int8_wo": "int8_wo",
    "int8_sq": "sq",
    "nvfp4": "nvfp4",
}
PLATEAU = 1e-3  # a larger batch that adds less than 0.1 % tokens/s adds nothing
KV_MODES = {"fp8": "fp8", "int8": "int8"}  # anything else: the model dtype, bfloat16 in the database
# The quant_algo ModelOpt writes into the checkpoint's quantization_config per weight format
# (toolchain/artifacts/quantized.py QUANT_ALGO), and the ones AIConfigurator 0.12.0 infers its modes from
# (aiconfigurator_core/sdk/models/helpers.py, _infer_quant_modes_from_raw_config: FP8 -> gemm fp8_static, fmha fp8,
# KV fp8; NVFP4 -> gemm nvfp4, fmha fp8, KV fp8). Any other quant_algo it refuses ("Unsupported quant algorithm"),
# so for those the GEMM mode is given as `estimate --gemm-quant-mode` would. Sources: docs/planning-estimates.md.
QUANT_ALGO = {
    "fp8": "FP8",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "int8_sq": "W8A8_SQ_PER_CHANNEL",
    "int8_wo": "W8A16",
    "nvfp4": "NVFP4",
}
READS_ALGO = {"FP8", "NVFP4"}
READS_KV = {"FP8"}  # kv_cache_quant_algo values it reads; INT8 it refuses ("Unsupported kv cache algorithm")


@dataclass(frozen=True)
class Query:
    system: str
    batch: int
    tp: int
    pp: int
    isl: int
    osl: int
    quant: str  # the checkpoint's quantization_config as JSON ("" when nothing is quantized): AIConfigurator
    # infers its quant modes from it, as its own CLI does from the checkpoint's config.json
    gemm: str | None = None  # given only where it cannot infer the mode from ``quant`` (READS_ALGO)
    kv: str | None = None
    mode: str = "agg"  # agg (in-flight batching) | static_ctx (prefill only) | static_gen (decode only)
    ctx_tokens: int | None = None  # context tokens per step (agg); None: one ISL, AIConfigurator's default


@dataclass
class Estimate:
    """One answer of the database: TTFT and TPOT at a batch, throughput, memory, and which database said so."""

    batch: int
    ttft_ms: float
    tpot_ms: float
    tok_s: float
    tok_s_per_gpu: float
    memory_gb: float
    database: str = ""  # "trtllm 1.3.0rc20"
    warning: str | None = None
    modes: dict[str, str] = field(default_factory=dict)  # the quant modes AIConfigurator ran: gemm, fmha, kvcache, moe
    ctx_tokens: int | None = None  # context tokens per step it scheduled

    @property
    def tok_s_per_user(self) -> float:
        return 1000.0 / self.tpot_ms if self.tpot_ms > 0 else 0.0


def unsupported(gpu: str, weights: str, arch: ModelArch, pp: int) -> str | None:
    """Why the database cannot estimate this cell (None when it can)."""
    if gpu not in SYSTEMS:
        return f"AIConfigurator's database has no {gpu} system (it has {', '.join(SYSTEMS)})"
    if weights not in GEMM_MODES:
        return f"AIConfigurator's database has no {weights} GEMMs"
    if arch.num_experts:
        return "mixture-of-experts models are estimated by the floor only here"
    if pp != 1:
        return "pipeline parallelism is estimated by the floor only here"
    return None


def model_config(arch: ModelArch, local_config: Path | None) -> dict[str, Any]:
    """A config.json AIConfigurator can read: the checkpoint's own (its ``quantization_config`` kept: the
    session writes the one that ships per query), else a Llama-shaped one from the catalog."""
    if local_config is not None and local_config.is_file():
        cfg: dict[str, Any] = json.loads(local_config.read_text())
        return cfg
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": arch.tie_embeddings,
        "torch_dtype": "bfloat16",
    }


def quantization(weights: str, kv_cache: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """What the checkpoint that ships says about its quantization, as AIConfigurator reads it: (its
    ``quantization_config`` in ModelOpt's form, or None for an unquantized checkpoint; the GEMM mode and the KV
    mode to give explicitly, None where AIConfigurator infers them from the config)."""
    algo = QUANT_ALGO.get(weights)
    kv_algo = kv_cache.upper() if kv_cache in KV_MODES else None
    if algo is None and kv_algo is None:
        return None, None, None
    qc: dict[str, Any] = {"quant_method": "modelopt"}
    gemm = kv = None
    if algo in READS_ALGO:
        qc["quant_algo"] = algo
    elif algo is not None:
        gemm = GEMM_MODES.get(weights)
    if kv_algo in READS_KV:
        qc["kv_cache_quant_algo"] = kv_algo
    elif kv_algo is not None:
        kv = KV_MODES[kv_cache]
    return (qc if len(qc) > 1 else None), gemm, kv


def shipped_quant(checkpoint: dict[str, Any] | None, composed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The checkpoint's own ``quantization_config`` where it describes the same quantization as the spec (it is
    the one that ships, with every field ModelOpt wrote), else the one composed from the spec."""
    if checkpoint and composed:
        same = all(
            str(checkpoint.get(k) or "").upper() == str(composed.get(k) or "").upper()
            for k in ("quant_algo", "kv_cache_quant_algo")
        )
        if same:
            return checkpoint
    return composed


def aic_python() -> str | None:
    """The interpreter of the AIConfigurator venv: ``TOOLCHAIN_AIC_PYTHON``, else the repository's ``.venv-aic``."""
    configured = settings.aic_python()
    if configured:
        return configured if Path(configured).is_file() or shutil.which(configured) else None
    local = REPO / ".venv-aic" / "bin" / "python"
    return str(local) if local.is_file() else None


def _readline(proc: Popen[str], timeout: float) -> str:
    """One line of the worker's stdout, or "" when it ends or says nothing for ``timeout`` seconds (then killed)."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            proc.wait()
            return ""
    return proc.stdout.readline()


def _concise(error: str) -> str:
    """The database's reason in words: without the site-packages path it names (the venv is not the user's
    business) and without the estimator's internal lookup keys ("for ContextKey { fmha_quant: ..., head_size: 32,
    ... }: tried lane_order [...]"), keeping the head size they name, which is what a small model lacks."""
    error = re.sub(r" at /\S+?(?=[;,]|$)", "", error)
    error = error.replace("PerfDataNotAvailableError: perf database error: ", "")
    head = re.search(r"head_size: (\d+)", error)
    error = re.sub(r"\s*for \w+ \{[^}]*\}", f" for head size {head.group(1)}" if head else "", error)
    return re.sub(r":?\s*tried lane_order \[[^\]]*\].*$", "", error).strip()


@dataclass
class Session:
    """A running worker; ``ask`` answers one query (cached), ``close`` ends it."""

    proc: Popen[str]
    config: dict[str, Any]  # the model's config.json, less its quantization_config
    checkpoint_quant: dict[str, Any] | None  # the checkpoint's own quantization_config, if it has one
    version: str
    tmp: tempfile.TemporaryDirectory[str]
    progress: Callable[[str], None] | None = None
    cache: dict[Query, Estimate | str] = field(default_factory=dict)
    databases: dict[str, str] = field(default_factory=dict)  # system -> "trtllm <version>"
    models: dict[str, str] = field(default_factory=dict)  # quantization_config JSON -> model directory

    @property
    def estimator(self) -> str:
        return f"aiconfigurator {self.version}"

    def model_path(self, quant: str) -> str:
        """The directory of a config.json carrying the quantization the query describes (written once)."""
        if quant not in self.models:
            composed = json.loads(quant) if quant else None
            qc = shipped_quant(self.checkpoint_quant, composed)
            cfg = {**self.config, **({"quantization_config": qc} if qc else {})}
            d = Path(self.tmp.name) / f"model{len(self.models)}"
            d.mkdir()
            (d / "config.json").write_text(json.dumps(cfg))
            self.models[quant] = str(d)
        return self.models[quant]

    def ask(self, q: Query) -> Estimate | str:
        """The estimate for ``q``, or the database's reason it has none."""
        if q in self.cache:
            return self.cache[q]
        if self.progress and q.system not in self.databases:
            self.progress(f"AIConfigurator: loading the {q.system} database")
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"model_path": self.model_path(q.quant), **asdict(q)}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as e:
            raise EstimatorMissingError("the AIConfigurator worker ended before the query") from e
        line = _readline(self.proc, QUERY_TIMEOUT_S)
        if not line:
            raise EstimatorMissingError(
                f"the AIConfigurator worker gave no answer for {q.system} batch {q.batch} TP{q.tp} "
                f"(ended, or silent for {QUERY_TIMEOUT_S:.0f} s)"
            )
        reply = json.loads(line)
        answer: Estimate | str
        if "error" in reply:
            answer = _concise(str(reply["error"]))
        else:
            database = f"trtllm {reply['backend_version']}"
            self.databases[q.system] = database
            answer = Estimate(
                q.batch,
                float(reply["ttft_ms"]),
                float(reply["tpot_ms"]),
                float(reply["tok_s"]),
                float(reply["tok_s_per_gpu"]),
                float(reply["memory_gb"]),
                database,
                reply.get("warning"),
                {k: str(v) for k, v in (reply.get("modes") or {}).items()},
                reply.get("ctx_tokens"),
            )
        self.cache[q] = answer
        return answer

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        finish(self.proc, timeout=10)
        self.tmp.cleanup()


def start(arch: ModelArch, local_config: Path | None, progress: Callable[[str], None] | None = None) -> Session | None:
    """Start the worker for ``arch``; None when the AIConfigurator venv is not installed."""
    python = aic_python()
    if python is None:
        return None
    tmp = tempfile.TemporaryDirectory(prefix="toolchain-aic-")
    try:
        cfg = model_config(arch, local_config)
    except (OSError, ValueError) as e:
        tmp.cleanup()
        raise EstimateUnavailableError(f"AIConfigurator cannot read {local_config}: {e}") from e
    checkpoint_quant = cfg.pop("quantization_config", None)
    if progress:
        progress("AIConfigurator: starting")
    proc = spawn_pipes([python, str(WORKER)], cwd=tmp.name)
    hello = _readline(proc, QUERY_TIMEOUT_S)
    try:
        ready = json.loads(hello) if hello else {"error": "the worker printed nothing"}
    except json.JSONDecodeError:
        ready = {"error": f"unexpected worker output {hello[:80]!r}"}
    if not ready.get("ready"):
        proc.kill()
        proc.wait()
        tmp.cleanup()
        raise EstimatorMissingError(f"{python}: {ready.get('error')}")
    qc = checkpoint_quant if isinstance(checkpoint_quant, dict) else None
    return Session(proc, cfg, qc, str(ready.get("aiconfigurator")), tmp, progress)


def open_session(
    spec: Any, arch: ModelArch, estimator: Estimator, progress: Callable[[str], None] | None = None
) -> Session | None:
    """The worker for ``spec``'s model (its local config.json when it has one): None when AIConfigurator is not
    installed and ``estimator`` is "auto" (the caller falls back to the floor and says so); with "aic" that is an
    error (exit 3)."""
    local = spec.local_source()
    session = start(arch, local / "config.json" if local else None, progress)
    if session is None and estimator == "aic":
        raise EstimatorMissingError(missing_message())
    return session


def query(cell: Cell, batch: int, mode: str = "agg", ctx_tokens: int | None = None) -> Query:
    """The database query of ``cell`` at ``batch``: its GPU's system, TP/PP, the traffic's lengths, and the
    quantization of the checkpoint that ships (AIConfigurator infers its modes from it)."""
    q = cell.spec.quantization
    isl, osl = lengths(cell)
    qc, gemm, kv = quantization(q.weights, q.kv_cache)
    quant = json.dumps(qc, sort_keys=True) if qc else ""
    return Query(SYSTEMS[cell.gpu.name], batch, cell.tp, cell.pp, isl, osl, quant, gemm, kv, mode, ctx_tokens)


def missing_message() -> str:
    where = settings.aic_python() or str(REPO / ".venv-aic" / "bin" / "python")
    return f"NVIDIA AIConfigurator {AIC_VERSION} is not installed ({where} not found)"


def ladder(cap: int) -> list[int]:
    """Powers of two below ``cap``, then ``cap`` (the disaggregated pools' batches, docs/dynamo.md)."""
    out, b = [], 1
    while b < cap:
        out.append(b)
        b *= 2
    return [*out, cap]


# The batches AIConfigurator's own aggregated sweep tries (aiconfigurator/sdk/sweep.py, _DEFAULT_AGG_BATCH_SCHEDULE)
SCHEDULE = [*range(1, 16), *range(16, 32, 4), *range(32, 64, 8), *range(64, 256, 16)]
SCHEDULE += [*range(256, 512, 32), *range(512, 1024, 256), 1024]


def schedule(cap: int) -> list[int]:
    """The batches a cell is estimated at: AIConfigurator's sweep schedule below ``cap``, then ``cap``."""
    return [*(b for b in SCHEDULE if b < cap), cap]


def ctx_tokens_list(isl: int) -> list[int]:
    """The context tokens per step AIConfigurator's aggregated sweep tries for ``isl`` (chunked prefill off, its
    default): multiples of the ISL (at least 512) up to max(8192, 2 × ISL), and 1 and 2 ISLs
    (aiconfigurator/sdk/sweep.py, _agg_ctx_tokens_list, ctx_stride 512)."""
    top = max(8192, 2 * isl)
    stride = max(isl, 512)
    large = -(-max(1024, 512, top // 8) // isl) * isl
    out: list[int] = []
    tokens = 0
    while True:
        tokens += stride if tokens < 8192 else large
        if tokens > top:
            break
        out.append(tokens)
    return sorted({*out, isl, 2 * isl})


def ctx_fits(batch: int, ctx_tokens: int, isl: int) -> bool:
    """AIConfigurator's guard: a step's context tokens leave at least one decoding request in a batch above 1."""
    prefills = -(-ctx_tokens // isl)
    return batch - prefills >= 0 and (batch == 1 or batch - prefills >= 1)


def meets(e: Estimate, tpot_ms: float | None, ttft_ms: float | None) -> bool:
    return (tpot_ms is None or e.tpot_ms <= tpot_ms) and (ttft_ms is None or e.ttft_ms <= ttft_ms)


def largest_meeting(
    curve: list[Estimate], tpot_ms: float | None, ttft_ms: float | None
) -> tuple[Estimate | None, str | None]:
    """The largest batch of ``curve`` whose estimated TPOT and TTFT meet the SLOs — where the estimate plateaus
    (AIConfigurator's in-flight batching admits one ISL of context per step, so concurrency saturates near OSL),
    the smallest batch that reaches the plateau. Returns (estimate, None), or (None, why) when even the smallest
    batch misses the SLOs."""
    ok = [e for e in curve if meets(e, tpot_ms, ttft_ms)]
    if ok:
        top = max(e.tok_s for e in ok)
        plateau = (e for e in ok if e.tok_s >= top * (1 - PLATEAU))
        return min(plateau, key=lambda e: (e.batch, -e.tok_s)), None
    if not curve:
        return None, "no estimate"
    e = curve[0]
    return None, f"batch {e.batch}: TPOT {e.tpot_ms:.2f} ms, TTFT {e.ttft_ms:.1f} ms"


def lengths(cell: Cell) -> tuple[int, int]:
    """ISL and OSL of the estimate: the traffic's means, or half the engine's limits."""
    t = cell.spec.traffic
    if t is not None:
        return max(1, int(t.input_tokens.mean)), max(1, int(t.output_tokens.mean))
    return max(1, cell.max_input_len // 2), max(1, (cell.max_seq_len - cell.max_input_len) // 2)


def _target(p: Any) -> float | None:
    value: float | None = p.p99 or p.p90 or p.p50
    return value


def fleet_at(
    cell: Cell, plan: CellPlan, batch: int, tok_s_per_instance: float, tokens_per_step: float
) -> dict[str, Any]:
    """The fleet that carries the traffic's peak when each instance runs ``batch`` requests at
    ``tok_s_per_instance``: the spec's utilization and headroom applied (``total_gpus``), and at full load
    (``gpus_at_full_load``, what AIConfigurator's ``recommend`` reports: ceil(load ÷ one replica's rate))."""
    traffic = cell.spec.traffic
    assert traffic is not None
    f: Fleet = fleet_size(
        peak_rps=traffic.peak_rps,
        avg_output_tokens=traffic.output_tokens.mean,
        tpot_target_ms=1000.0 * batch / tok_s_per_instance,
        batch_at_sla=batch,
        gpus_per_instance=cell.tp * cell.pp,
        utilization=traffic.target_utilization,
        headroom=traffic.burst_headroom,
        kv_max_concurrency=plan.max_concurrency_at_avg,
        tokens_per_step=tokens_per_step,
    )
    full = max(1, ceil_clean(f.raw_instances)) * f.gpus_per_instance
    return {
        **asdict(f),
        "raw_gpus": f.raw_gpus,
        "total_gpus": f.total_gpus,
        "gpus_at_full_load": full,
        "utilization": traffic.target_utilization,
        "headroom": traffic.burst_headroom,
    }


def estimate_curve(
    session: Session, cell: Cell, cap: int, tpot_ms: float | None = None
) -> tuple[list[Estimate], str | None]:
    """The database's estimates of ``cell`` at every batch of AIConfigurator's schedule up to ``cap`` and every
    context-token budget per step its sweep tries. A failure ends the batch (a larger budget has no more data)
    and, before any estimate, the walk; so does a batch whose every point misses ``tpot_ms`` (TPOT grows with the
    batch). Returns (curve, why none)."""
    curve: list[Estimate] = []
    isl = lengths(cell)[0]
    for b in schedule(cap):
        points: list[Estimate] = []
        for ctx in ctx_tokens_list(isl):
            if not ctx_fits(b, ctx, isl):
                break
            e = session.ask(query(cell, b, ctx_tokens=ctx))
            if isinstance(e, str):
                if not curve and not points:
                    return curve, e
                break
            points.append(e)
        if not points:
            break
        curve += points
        if tpot_ms is not None and min(e.tpot_ms for e in points) > tpot_ms:
            break
    return curve, None


def apply_estimate(plan: CellPlan, cell: Cell, arch: ModelArch, session: Session, *, strict: bool = False) -> None:
    """Add the database's figures to a floor plan: batch 1, the largest batch meeting the SLOs within the engine's
    max batch and the KV budget, and the fleet at that batch (the floor's fleet stays as the lower bound).
    ``strict`` (``--estimator aic``): a cell the database cannot estimate is an error, not a floor-only cell."""
    q = cell.spec.quantization
    why = unsupported(cell.gpu.name, q.weights, arch, cell.pp)
    if why is None and plan.free_bytes <= 0:
        return  # the cell does not fit: its error says so, and no batch runs
    tpot_t, ttft_t = _target(cell.spec.slo.tpot_ms), _target(cell.spec.slo.ttft_ms)
    if why is None:
        cap = max(1, min(cell.max_batch_size, plan.max_concurrency_at_avg))
        curve, none = estimate_curve(session, cell, cap, tpot_t)
        if not curve:
            why = f"AIConfigurator: {none}"
    if why is not None:
        if strict:
            raise EstimateUnavailableError(f"cell {cell.id}: no silicon estimate: {why}")
        plan.no_estimate = why
        plan.warnings.append(f"no silicon estimate: {why}; this cell's figures are the roofline floor only")
        return
    isl, osl = lengths(cell)
    system = SYSTEMS[cell.gpu.name]
    at, miss = largest_meeting(curve, tpot_t, ttft_t)
    b1 = curve[0]
    plan.estimator = session.estimator
    plan.estimate = {
        "estimator": session.estimator,
        "database": b1.database,
        "system": system,
        "modes": b1.modes,
        "isl": isl,
        "osl": osl,
        "batch_1": asdict(b1),
        "at_batch": asdict(at) if at else None,
        "batch_cap": cap,
        "floor_tpot_at_batch_ms": floor_tpot_ms_at(plan, cell, arch, at.batch) if at else None,
        "curve": [{**asdict(e), "meets_slo": meets(e, tpot_t, ttft_t)} for e in curve],
    }
    kv = kv_differs(b1.modes, q.kv_cache)
    if kv:
        plan.warnings.append(kv)
    if at is None:
        plan.errors.append(
            f"no batch meets the SLOs on the silicon estimate ({session.estimator}, {b1.database} on {system}): "
            f"{miss}; relax the SLO, raise TP or use a faster GPU"
        )
        return
    if at.warning:
        plan.warnings.append(f"AIConfigurator at batch {at.batch}: {at.warning}")
    traffic = cell.spec.traffic
    if traffic is None:
        return
    spec_k = traffic.speculative
    tps = speculative_tokens(spec_k.acceptance_rate, spec_k.draft_len) if spec_k else 1.0
    plan.fleet_estimate = fleet_at(cell, plan, at.batch, at.tok_s, tps)


def kv_differs(modes: dict[str, str], kv_cache: str) -> str | None:
    """Where AIConfigurator runs a KV cache other than the spec's (its FP8 attention reads an FP8 KV cache)."""
    ran = modes.get("kvcache")
    want = KV_MODES.get(kv_cache, "bfloat16")
    if ran is None or ran == want:
        return None
    return (
        f"AIConfigurator estimates a {ran} KV cache (fmha {modes.get('fmha', '?')}) where the spec has "
        f"kv_cache {kv_cache}: it infers that from the checkpoint's quantization_config; "
        f"set quantization.kv_cache: {ran} to build what it estimated"
    )


def modes_line(plans: list[CellPlan]) -> str | None:
    """The quant modes AIConfigurator ran, e.g. "gemm fp8_static, fmha fp8, KV fp8 (from the checkpoint's
    quantization_config)", one group per distinct set; None when no cell has an estimate."""
    seen: list[str] = []
    for p in plans:
        if p.estimate and p.estimate.get("modes"):
            text = modes_text(p.estimate["modes"])
            if text not in seen:
                seen.append(text)
    return "; ".join(seen) if seen else None


def provenance_line(plans: list[CellPlan]) -> str | None:
    """One line naming what produced the estimate columns, e.g. "aiconfigurator 0.12.0 (trtllm 1.3.0rc20 on
    h100_sxm, h200_sxm)"; None when no cell has an estimate."""
    by_db: dict[tuple[str, str], list[str]] = {}
    for p in plans:
        if p.estimate:
            systems = by_db.setdefault((p.estimate["estimator"], p.estimate["database"]), [])
            if p.estimate["system"] not in systems:
                systems.append(p.estimate["system"])
    if not by_db:
        return None
    return "; ".join(f"{est} ({db} on {', '.join(s)})" for (est, db), s in by_db.items())


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b and not math.isnan(b) else None
