"""The silicon estimate beside the roofline floor: NVIDIA AIConfigurator's measured per-kernel database.

AIConfigurator (``aiconfigurator`` 0.12.0; its database is measured TensorRT-LLM 1.3.0rc20 kernels per GPU system)
pins packages the toolchain pins differently, so it lives in its own venv, ``.venv-aic``
(``scripts/setup-aic.sh``), and runs as a subprocess (``aic_worker.py``, one JSON line per query). Where it has no
answer — a GPU, precision or model it does not cover, or the venv is missing under ``--estimator auto`` — the
cell keeps the floor only and says why; never a silent floor. Sources: docs/planning-estimates.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolchain import settings
from toolchain.errors import EstimatorMissingError
from toolchain.planning.perf import Fleet, fleet_size, speculative_tokens
from toolchain.planning.plan import CellPlan
from toolchain.specs.arch import ModelArch
from toolchain.specs.matrix import Cell

Estimator = Literal["auto", "aic", "floor"]
AIC_VERSION = "0.12.0"
REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("aic_worker.py")
QUERY_TIMEOUT_S = 120.0  # one estimate takes about 1.5 s on a loaded 2-core machine; the first loads the database

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
# spec weight format -> AIConfigurator GEMM quant mode (aiconfigurator_core/sdk/common.py GEMMQuantMode)
GEMM_MODES = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "int4_awq": "int4_wo",
    "int8_wo": "int8_wo",
    "int8_sq": "sq",
    "nvfp4": "nvfp4",
}
KV_MODES = {"fp8": "fp8", "int8": "int8"}  # anything else: the model dtype, bfloat16 in the database


@dataclass(frozen=True)
class Query:
    system: str
    batch: int
    tp: int
    pp: int
    isl: int
    osl: int
    gemm: str
    kv: str


@dataclass
class Estimate:
    """One answer of the database: TTFT and TPOT at a batch, throughput, memory."""

    batch: int
    ttft_ms: float
    tpot_ms: float
    tok_s: float
    tok_s_per_gpu: float
    memory_gb: float
    warning: str | None = None


@dataclass
class Provenance:
    estimator: str  # "aiconfigurator 0.12.0"
    database: str  # "trtllm 1.3.0rc20"
    system: str


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
    """A config.json AIConfigurator can read: the checkpoint's own, else a Llama-shaped one from the catalog."""
    if local_config is not None and local_config.is_file():
        cfg: dict[str, Any] = json.loads(local_config.read_text())
        cfg.pop("quantization_config", None)  # the quant modes are given per query
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


def aic_python() -> str | None:
    """The interpreter of the AIConfigurator venv: ``TOOLCHAIN_AIC_PYTHON``, else the repository's ``.venv-aic``."""
    configured = settings.aic_python()
    if configured:
        return configured if Path(configured).is_file() or shutil.which(configured) else None
    local = REPO / ".venv-aic" / "bin" / "python"
    return str(local) if local.is_file() else None


@dataclass
class Session:
    """A running worker; ``ask`` answers one query (cached), ``close`` ends it."""

    proc: subprocess.Popen[str]
    model_path: str
    version: str
    tmp: tempfile.TemporaryDirectory[str]
    progress: Callable[[str], None] | None = None
    cache: dict[Query, Estimate | str] = field(default_factory=dict)
    backend_version: str = ""

    def ask(self, q: Query) -> Estimate | str:
        """The estimate for ``q``, or the database's reason it has none."""
        if q in self.cache:
            return self.cache[q]
        if self.progress:
            self.progress(f"AIConfigurator: {q.system} batch {q.batch} TP{q.tp} ({q.gemm} GEMMs, {q.kv} KV)")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"model_path": self.model_path, **q.__dict__}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise EstimatorMissingError("the AIConfigurator worker ended without an answer")
        reply = json.loads(line)
        answer: Estimate | str
        if "error" in reply:
            answer = str(reply["error"])
        else:
            self.backend_version = str(reply["backend_version"])
            answer = Estimate(
                q.batch,
                reply["ttft_ms"],
                reply["tpot_ms"],
                reply["tok_s"],
                reply["tok_s_per_gpu"],
                reply["memory_gb"],
                reply.get("warning"),
            )
        self.cache[q] = answer
        return answer

    def provenance(self, system: str) -> Provenance:
        return Provenance(f"aiconfigurator {self.version}", f"trtllm {self.backend_version or '?'}", system)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.tmp.cleanup()


def start(arch: ModelArch, local_config: Path | None, progress: Callable[[str], None] | None = None) -> Session | None:
    """Start the worker for ``arch``; None when the AIConfigurator venv is not installed."""
    python = aic_python()
    if python is None:
        return None
    tmp = tempfile.TemporaryDirectory(prefix="toolchain-aic-")
    (Path(tmp.name) / "config.json").write_text(json.dumps(model_config(arch, local_config)))
    if progress:
        progress("AIConfigurator: loading its database")
    proc = subprocess.Popen(
        [python, str(WORKER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp.name,
    )
    assert proc.stdout is not None
    hello = proc.stdout.readline()
    try:
        ready = json.loads(hello) if hello else {"error": "the worker printed nothing"}
    except json.JSONDecodeError:
        ready = {"error": f"unexpected worker output {hello[:80]!r}"}
    if not ready.get("ready"):
        proc.kill()
        proc.wait()
        tmp.cleanup()
        raise EstimatorMissingError(f"{python}: {ready.get('error')}")
    return Session(proc, tmp.name, str(ready.get("aiconfigurator")), tmp, progress)


def missing_message() -> str:
    where = settings.aic_python() or str(REPO / ".venv-aic" / "bin" / "python")
    return f"NVIDIA AIConfigurator {AIC_VERSION} is not installed ({where} not found)"


def ladder(cap: int) -> list[int]:
    """The batches searched: powers of two below ``cap``, then ``cap``."""
    out, b = [], 1
    while b < cap:
        out.append(b)
        b *= 2
    return [*out, cap]


def largest_meeting(
    ask: Callable[[int], Estimate | str], cap: int, tpot_ms: float | None, ttft_ms: float | None
) -> tuple[Estimate | None, str | None]:
    """The largest batch on the ladder up to ``cap`` whose estimated TPOT and TTFT meet the SLOs (binary search:
    both grow with the batch). Returns (estimate, None), or (None, why) when even batch 1 misses or has no data."""

    def meets(e: Estimate) -> bool:
        return (tpot_ms is None or e.tpot_ms <= tpot_ms) and (ttft_ms is None or e.ttft_ms <= ttft_ms)

    steps = ladder(cap)
    best: Estimate | None = None
    why: str | None = None
    lo, hi = 0, len(steps) - 1
    top = ask(steps[hi])
    if isinstance(top, Estimate) and meets(top):
        return top, None
    while lo <= hi:
        mid = (lo + hi) // 2
        e = ask(steps[mid])
        if isinstance(e, Estimate) and meets(e):
            best, lo = e, mid + 1
        else:
            if isinstance(e, str):
                why = e
            elif why is None:
                why = f"batch {e.batch}: TPOT {e.tpot_ms:.2f} ms, TTFT {e.ttft_ms:.1f} ms"
            hi = mid - 1
    return best, (None if best else why)


def _lengths(cell: Cell) -> tuple[int, int]:
    """ISL and OSL of the estimate: the traffic's means, or half the engine's limits."""
    t = cell.spec.traffic
    if t is not None:
        return max(1, int(t.input_tokens.mean)), max(1, int(t.output_tokens.mean))
    return max(1, cell.max_input_len // 2), max(1, (cell.max_seq_len - cell.max_input_len) // 2)


def _target(p: Any) -> float | None:
    value: float | None = p.p99 or p.p90 or p.p50
    return value


def apply_estimate(plan: CellPlan, cell: Cell, arch: ModelArch, session: Session) -> None:
    """Add the database's figures to a floor plan: batch 1, the largest batch meeting the SLOs within the engine's
    max batch and the KV budget, and the fleet at that batch (the floor's fleet stays as the lower bound)."""
    q = cell.spec.quantization
    why = unsupported(cell.gpu.name, q.weights, arch, cell.pp)
    if why is not None:
        plan.warnings.append(f"no silicon estimate: {why}; the figures are the roofline floor only")
        return
    if plan.free_bytes <= 0:
        return
    isl, osl = _lengths(cell)
    system = SYSTEMS[cell.gpu.name]
    gemm, kv = GEMM_MODES[q.weights], KV_MODES.get(q.kv_cache, "bfloat16")

    def ask(batch: int) -> Estimate | str:
        return session.ask(Query(system, batch, cell.tp, cell.pp, isl, osl, gemm, kv))

    b1 = ask(1)
    if isinstance(b1, str):
        plan.warnings.append(f"no silicon estimate: AIConfigurator: {b1}; the figures are the roofline floor only")
        return
    cap = max(1, min(cell.max_batch_size, plan.max_concurrency_at_avg))
    tpot_t, ttft_t = _target(cell.spec.slo.tpot_ms), _target(cell.spec.slo.ttft_ms)
    at, miss = largest_meeting(ask, cap, tpot_t, ttft_t)
    prov = session.provenance(system)
    plan.estimator = prov.estimator
    plan.estimate = {
        "estimator": prov.estimator,
        "database": prov.database,
        "system": prov.system,
        "isl": isl,
        "osl": osl,
        "batch_1": asdict(b1),
        "at_batch": asdict(at) if at else None,
        "batch_cap": cap,
    }
    if at is None:
        plan.errors.append(
            f"no batch meets the SLOs on the silicon estimate ({prov.estimator}, {prov.system}): {miss}; "
            "relax the SLO, raise TP or use a faster GPU"
        )
        return
    if cell.spec.traffic is None:
        return
    traffic = cell.spec.traffic
    spec_k = traffic.speculative
    tps = speculative_tokens(spec_k.acceptance_rate, spec_k.draft_len) if spec_k else 1.0
    f: Fleet = fleet_size(
        peak_rps=traffic.peak_rps,
        avg_output_tokens=traffic.output_tokens.mean,
        tpot_target_ms=1000.0 * at.batch / at.tok_s,
        batch_at_sla=at.batch,
        gpus_per_instance=cell.tp * cell.pp,
        utilization=traffic.target_utilization,
        headroom=traffic.burst_headroom,
        kv_max_concurrency=plan.max_concurrency_at_avg,
        tokens_per_step=tps,
    )
    plan.fleet_estimate = {**asdict(f), "raw_gpus": f.raw_gpus, "total_gpus": f.total_gpus}
