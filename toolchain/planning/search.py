"""`toolchain plan SPEC --search`: the configuration space for the spec's traffic and SLOs, ranked.

Candidates: GPU (the catalog, or ``gpus``) × weight format × KV-cache dtype × TP × max batch. For each (GPU,
format, KV dtype, TP) the spec is re-planned as one cell: the compatibility rules refuse the combinations that
cannot be built (counted apart: "invalid", never among the SLO misses), the memory fit rejects what does not fit,
the silicon estimate (``toolchain.planning.estimate``) walks AIConfigurator's batch schedule and context-token
budgets up to ``MAX_BATCH`` and the KV budget, and the batch that meets the SLOs becomes that candidate's max
batch. Candidates are ranked by the estimated GPUs the traffic needs (the spec's utilization and headroom
applied), or by $/h where the user gives a price per GPU-hour; ties by tokens/s per GPU. A candidate the
database cannot estimate is listed apart, with its floor (a lower bound), never ranked among the estimates. The
Pareto front is over every estimated (configuration, batch) point: tokens/s per GPU against tokens/s per user
(1000 ÷ TPOT).

``write_spec`` writes a chosen candidate as the spec's matrix (one cell), named and described for what was
chosen, keeping the original file's comments, so ``toolchain build`` and ``matrix`` build what the search picked.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolchain import yamledit, yamlout
from toolchain.errors import UserInputError
from toolchain.hardware.catalog import CATALOG
from toolchain.planning import estimate as E
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.progress import Progress, silent
from toolchain.specs.arch import ModelArch, arch_for_spec
from toolchain.specs.matrix import Cell, expand
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import all_problems

DEFAULT_FORMATS = ("bf16", "fp8", "int4_awq", "nvfp4")
KV_CACHES = ("auto", "fp8", "int8")  # every KV dtype is tried; the rules refuse the ones a format or GPU cannot run
DEFAULT_TPS = (1, 2, 4, 8)
MAX_BATCH = 1024  # the top of the batch ladder a candidate is estimated on


@dataclass
class Candidate:
    gpu: str
    weights: str
    tp: int
    kv_cache: str = "auto"
    cell_id: str = ""
    max_batch_size: int | None = None  # the largest batch that meets the SLOs (the engine's max batch)
    estimator: str = "floor"  # what produced gpus/tpot/ttft: "aiconfigurator 0.12.0 (trtllm ... on ...)" or floor
    gpus: int | None = None  # the fleet at that batch, the spec's utilization and burst headroom applied
    gpus_at_full_load: int | None = None  # the same fleet at 100 % load (what AIConfigurator's recommend reports)
    floor_gpus: int | None = None  # the floor's fleet: a lower bound
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    tok_s_per_gpu: float | None = None
    tok_s_per_user: float | None = None
    price_per_gpu_h: float | None = None
    cost_per_h: float | None = None
    rejected: str | None = None  # why it cannot serve the traffic at the SLOs
    kind: str | None = None  # of the rejection: "invalid" (cannot be built), "fit" (memory), "slo" (misses the SLOs)
    modes: dict[str, str] = field(default_factory=dict)  # AIConfigurator's quant modes for it
    curve: list[dict[str, Any]] = field(default_factory=list)

    @property
    def config(self) -> str:
        return f"{self.gpu} {self.weights} KV {self.kv_cache} TP{self.tp}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "config": self.config}


@dataclass
class SearchResult:
    spec: str
    model: str
    traffic: str
    slo: str
    estimator: str  # what the ranking used: the estimate, or the floor (no AIConfigurator, --estimator floor)
    ranked: list[Candidate]  # estimated candidates that serve the traffic at the SLOs, best first
    floor_only: list[Candidate]  # no silicon data: ranked by their floor (a lower bound), apart
    rejected: list[Candidate]
    pareto: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        if self.ranked:
            return self.ranked[0]
        return self.floor_only[0] if self.floor_only and self.estimator == "floor" else None

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "model": self.model,
            "traffic": self.traffic,
            "slo": self.slo,
            "estimator": self.estimator,
            "best": self.best.to_json() if self.best else None,
            "ranked": [c.to_json() for c in self.ranked],
            "floor_only": [c.to_json() for c in self.floor_only],
            "rejected": [{"config": c.config, "kind": c.kind, "why": c.rejected} for c in self.rejected],
            "refusals": [{"kind": k, "why": w, "count": n} for k, w, n in self.refusals()],
            "pareto": self.pareto,
            "notes": self.notes,
        }

    def refusals(self) -> list[tuple[str, str, int]]:
        """Each distinct reason a candidate was refused, once, with how many: (kind, reason, count), invalid
        combinations first, then memory, then SLO misses, most frequent first."""
        counts: dict[tuple[str, str], int] = {}
        for c in self.rejected:
            key = (c.kind or "slo", reason_key(c.rejected or ""))
            counts[key] = counts.get(key, 0) + 1
        order = {"invalid": 0, "fit": 1, "slo": 2}
        items = sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 3), -kv[1], kv[0][1]))
        return [(k, w, n) for (k, w), n in items]


def reason_key(why: str) -> str:
    """A refusal without what differs between candidates (the cell, figures in parentheses), so that the same
    reason is counted once."""
    why = re.sub(r"^cell \S+: ", "", why)
    return re.sub(r"\s*\([^()]*\)", "", why).strip()


def parse_prices(items: list[str]) -> dict[str, float]:
    """``GPU=USD`` per GPU-hour, e.g. ``H100-SXM=2.49``; the GPU must be in the catalog."""
    prices: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or price < 0:
            raise UserInputError(f"--price {item!r} is not GPU=USD per GPU-hour", "e.g. --price H100-SXM=2.49")
        if name not in CATALOG:
            raise UserInputError(f"--price {item!r}: no GPU {name!r} in the catalog", "run `toolchain gpus`")
        prices[name] = price
    return prices


def variant(
    spec: EngineSpec, gpu: str, weights: str, tp: int, max_batch: int, kv_cache: str | None = None
) -> EngineSpec:
    """``spec`` as one cell: ``gpu``, ``weights``, TP ``tp``, max batch ``max_batch``, the largest lengths, and
    ``kv_cache`` (None: the spec's)."""
    d = spec.model_dump(mode="json", exclude_unset=True)  # what the user wrote: rules read what was set
    m = spec.matrix
    matrix: dict[str, Any] = {"gpu": [gpu], "max_batch_size": [max_batch], "max_seq_len": [max(m.max_seq_len)]}
    if m.max_input_len:
        matrix["max_input_len"] = [max(m.max_input_len)]
    matrix["tp"] = [tp]
    d["matrix"] = matrix
    d.setdefault("parallelism", {})["tp"] = tp
    d.setdefault("quantization", {})["weights"] = weights
    if kv_cache is not None:
        d["quantization"]["kv_cache"] = kv_cache
    cg = d.get("serving", {}).get("cuda_graphs", {})
    if cg.get("batch_sizes"):  # captured sizes above the engine's max batch would never run
        cg["batch_sizes"] = [b for b in cg["batch_sizes"] if b <= max_batch] or [max_batch]
    if cg.get("cache_size") and cg["cache_size"] > max_batch:
        cg["cache_size"] = max_batch
    return EngineSpec.model_validate(d).with_base_dir(spec.base_dir)


def _first_problem(spec: EngineSpec, cells: list[Cell]) -> str | None:
    problems = all_problems(spec, cells)
    return f"{problems[0].message} — {problems[0].fix}" if problems else None


def _refuse(c: Candidate, why: str, kind: str) -> Candidate:
    c.rejected, c.kind = why, kind
    return c


def _plan_kind(error: str) -> str:
    """A plan's error: an SLO the cell cannot meet, else memory that does not fit."""
    return "slo" if "SLO" in error else "fit"


def _fill(c: Candidate, plan: CellPlan, prices: dict[str, float]) -> None:
    c.cell_id = plan.cell_id
    c.floor_gpus = plan.fleet["total_gpus"] if plan.fleet else None
    c.price_per_gpu_h = prices.get(c.gpu)
    est = plan.estimate
    if est and est["at_batch"] and plan.fleet_estimate:
        at = est["at_batch"]
        c.estimator = f"{est['estimator']} ({est['database']} on {est['system']})"
        c.max_batch_size = at["batch"]
        c.gpus = plan.fleet_estimate["total_gpus"]
        c.gpus_at_full_load = plan.fleet_estimate["gpus_at_full_load"]
        c.tpot_ms, c.ttft_ms, c.tok_s_per_gpu = at["tpot_ms"], at["ttft_ms"], at["tok_s_per_gpu"]
        c.tok_s_per_user = 1000.0 / at["tpot_ms"]
        c.modes = dict(est.get("modes") or {})
    elif plan.fleet:
        c.max_batch_size = plan.batch_at_sla
        c.gpus = plan.fleet["total_gpus"]
        c.gpus_at_full_load = plan.fleet["gpus_at_full_load"]
        c.tpot_ms = plan.tpot_floor_at_sla_ms
        c.ttft_ms = plan.prefill_ms_avg_input
        c.tok_s_per_gpu = plan.tok_s_per_gpu_at_sla
        c.tok_s_per_user = 1000.0 / plan.tpot_floor_at_sla_ms if plan.tpot_floor_at_sla_ms else None
    if c.price_per_gpu_h is not None and c.gpus is not None:
        c.cost_per_h = c.price_per_gpu_h * c.gpus


def _candidate(
    spec: EngineSpec,
    arch: ModelArch,
    combo: tuple[str, str, str, int],
    session: E.Session | None,
    prices: dict[str, float],
) -> Candidate:
    """One (GPU, format, KV dtype, TP): refused with its reason and kind, or planned at the batch that meets the
    SLOs."""
    gpu, weights, kv, tp = combo
    c = Candidate(gpu, weights, tp, kv)
    try:
        probe = variant(spec, gpu, weights, tp, MAX_BATCH, kv)
    except ValueError as e:  # pydantic: a combination the spec model refuses
        return _refuse(c, str(e).splitlines()[0], "invalid")
    cell = expand(probe)[0]
    problem = _first_problem(probe, [cell])
    if problem:
        return _refuse(c, problem, "invalid")
    plan = plan_cell(cell, arch)
    if plan.errors:
        return _refuse(c, plan.errors[0], _plan_kind(plan.errors[0]))
    why = E.unsupported(gpu, weights, arch, cell.pp)
    batch = plan.batch_at_sla or 1
    if session is not None and why is None:
        cap = max(1, min(MAX_BATCH, plan.max_concurrency_at_avg))
        tpot_t, ttft_t = E._target(spec.slo.tpot_ms), E._target(spec.slo.ttft_ms)
        curve, none = E.estimate_curve(session, cell, cap, tpot_t)
        c.curve = [{**asdict(e), "meets_slo": E.meets(e, tpot_t, ttft_t)} for e in curve]
        at, miss = E.largest_meeting(curve, tpot_t, ttft_t)
        if not curve:
            why = f"AIConfigurator: {none}"
        elif at is None:
            return _refuse(c, f"no batch meets the SLOs on the silicon estimate ({miss})", "slo")
        else:
            batch = at.batch
    final = variant(spec, gpu, weights, tp, batch, kv)
    fcell = expand(final)[0]
    problem = _first_problem(final, [fcell])
    if problem:
        return _refuse(c, problem, "invalid")
    fplan = plan_cell(fcell, arch)
    if session is not None and why is None:
        E.apply_estimate(fplan, fcell, arch, session)
    if fplan.errors:
        return _refuse(c, fplan.errors[0], _plan_kind(fplan.errors[0]))
    _fill(c, fplan, prices)
    if why is not None:
        c.estimator = f"floor ({why})"
    return c


def pareto_front(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points no other point beats on both tokens/s per GPU and tokens/s per user, by tokens/s per user; of
    points with the same figures (two KV dtypes AIConfigurator runs alike) the first only."""
    unique: dict[tuple[float, float], dict[str, Any]] = {}
    for p in points:
        unique.setdefault((round(p["tok_s_per_gpu"], 6), round(p["tok_s_per_user"], 6)), p)
    points = list(unique.values())
    front = [
        p
        for p in points
        if not any(
            q["tok_s_per_gpu"] >= p["tok_s_per_gpu"]
            and q["tok_s_per_user"] >= p["tok_s_per_user"]
            and (q["tok_s_per_gpu"] > p["tok_s_per_gpu"] or q["tok_s_per_user"] > p["tok_s_per_user"])
            for q in points
        )
    ]
    return sorted(front, key=lambda p: p["tok_s_per_user"])


def _rank_key(c: Candidate, priced: bool) -> tuple[float, float, float]:
    cost = c.cost_per_h if c.cost_per_h is not None else float("inf")
    gpus = float(c.gpus) if c.gpus is not None else float("inf")
    return (cost if priced else gpus, gpus, -(c.tok_s_per_gpu or 0.0))


def search_spec(
    spec: EngineSpec,
    *,
    gpus: list[str] | None = None,
    formats: list[str] | None = None,
    tps: list[int] | None = None,
    prices: dict[str, float] | None = None,
    estimator: E.Estimator = "auto",
    progress: Progress = silent,
) -> SearchResult:
    """Enumerate and rank the configurations that serve ``spec``'s traffic at its SLOs. ``progress`` gets one
    counted stage ("search", candidates done of all) and a line when each GPU's database loads."""
    if spec.traffic is None:
        raise UserInputError(
            f"spec '{spec.name}' has no traffic: the search sizes fleets for a traffic",
            "add traffic: {peak_rps, input_tokens, output_tokens} to the spec",
        )
    prices = prices or {}
    gpu_list = gpus or list(CATALOG)
    for g in gpu_list:
        if g not in CATALOG:
            raise UserInputError(f"--gpus: no GPU {g!r} in the catalog", "run `toolchain gpus` for the names")
    fmt_list = formats or list(dict.fromkeys([spec.quantization.weights, *DEFAULT_FORMATS]))
    tp_list = tps or list(DEFAULT_TPS)
    arch = arch_for_spec(spec)
    notes: list[str] = []
    session: E.Session | None = None
    if estimator != "floor":
        session = E.open_session(spec, arch, estimator, progress)
        if session is None:
            notes.append(f"{E.missing_message()}: ranked on the roofline floor only (scripts/setup-aic.sh)")
    try:
        out: list[Candidate] = []
        combos = [(g, f, k, t) for g in gpu_list for f in fmt_list for k in KV_CACHES for t in tp_list]
        for i, combo in enumerate(combos):
            progress("search", i, len(combos), unit="configurations", message=" ".join(map(str, combo)))
            out.append(_candidate(spec, arch, combo, session, prices))
        progress("search", len(combos), len(combos), unit="configurations")
    finally:
        if session is not None:
            session.close()
    used = "floor" if session is None else session.estimator
    feasible = [c for c in out if c.rejected is None]
    estimated = [c for c in feasible if not c.estimator.startswith("floor")]
    floor_only = [c for c in feasible if c.estimator.startswith("floor")]
    priced = bool(prices)
    estimated.sort(key=lambda c: _rank_key(c, priced))
    floor_only.sort(key=lambda c: _rank_key(c, priced))
    points = [
        {"config": c.config, **p, "tok_s_per_user": 1000.0 / p["tpot_ms"]}
        for c in out
        for p in c.curve
        if p["tpot_ms"] > 0
    ]
    traffic = spec.traffic
    return SearchResult(
        spec=spec.name,
        model=arch.name,
        traffic=f"{traffic.peak_rps:g} req/s, {traffic.input_tokens.mean} in / {traffic.output_tokens.mean} out",
        slo=_slo_text(spec),
        estimator=used,
        ranked=estimated,
        floor_only=floor_only,
        rejected=[c for c in out if c.rejected is not None],
        pareto=pareto_front(points),
        notes=notes,
    )


def _slo_text(spec: EngineSpec) -> str:
    tpot, ttft = E._target(spec.slo.tpot_ms), E._target(spec.slo.ttft_ms)
    parts = [f"TTFT ≤ {ttft:g} ms" if ttft else "", f"TPOT ≤ {tpot:g} ms" if tpot else ""]
    return ", ".join(p for p in parts if p) or "none"


def written_name(name: str, choice: Candidate) -> str:
    """The written spec's name: the original's, and what was chosen (the spec name's pattern: lower case)."""
    tail = f"-{choice.gpu}-{choice.weights}-kv-{choice.kv_cache}-tp{choice.tp}".lower()
    base = re.sub(r"[^a-z0-9._-]", "-", name.lower())[: 80 - len(tail)]
    return re.sub(r"[^a-z0-9._-]", "-", base + tail)


def write_spec(src: Path, out: Path, choice: Candidate, result: SearchResult) -> Path:
    """Write ``src`` with ``choice`` as its matrix (GPU, max batch, TP), weight format and KV-cache dtype, named
    and described for it, atomically; the model source is re-based when it is a relative local path. Every line
    of ``src`` it does not change is kept, its comments too. Returns ``out``."""

    from toolchain.specs.loader import load_spec, safe_yaml

    text = src.read_text()
    data = safe_yaml(text)
    spec = load_spec(src)
    if choice.max_batch_size is None:
        raise UserInputError(f"{choice.config} has no batch to write", "pick a ranked candidate")
    picked = variant(spec, choice.gpu, choice.weights, choice.tp, choice.max_batch_size, choice.kv_cache)
    changes: list[tuple[list[str], Any]] = []

    def put(path: list[str], value: Any) -> None:
        node = data
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
        changes.append((path, value))

    put(["name"], written_name(spec.name, choice))
    put(
        ["description"],
        f"{choice.config}, max batch {choice.max_batch_size}: {choice.gpus} GPUs for {result.traffic} at "
        f"{result.slo} (toolchain plan --search, {choice.estimator})",
    )
    put(["matrix"], {k: v for k, v in picked.matrix.model_dump(mode="json").items() if v is not None})
    put(["parallelism", "tp"], choice.tp)
    put(["quantization", "weights"], choice.weights)
    put(["quantization", "kv_cache"], choice.kv_cache)
    cg = picked.serving.cuda_graphs
    if "serving" in data and "cuda_graphs" in data["serving"]:
        graphs = dict(data["serving"]["cuda_graphs"])
        if cg.batch_sizes is not None:
            graphs["batch_sizes"] = list(cg.batch_sizes)
        if cg.cache_size is not None and "cache_size" in graphs:
            graphs["cache_size"] = cg.cache_size
        put(["serving", "cuda_graphs"], graphs)
    local = spec.local_source()
    source = str(data.get("model", {}).get("source", ""))
    if local is not None and not Path(source).expanduser().is_absolute():
        put(["model", "source"], os.path.relpath(local, out.resolve().parent))
    header = (
        f"# Written by `toolchain plan {src} --search`: {choice.config}, max batch {choice.max_batch_size}, "
        f"{choice.gpus} GPUs for {result.traffic} at {result.slo}\n"
        f"# estimator: {choice.estimator}\n"
    )
    body = yamledit.edit(text, changes, data) or yamlout.dump(data, sort_keys=False, allow_unicode=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(header + body)
    os.replace(tmp, out)
    return out


def write_plot(result: SearchResult, path: Path) -> Path:
    """The Pareto plot: every estimated point (tokens/s per user × tokens/s per GPU), the front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    by_config: dict[str, list[dict[str, Any]]] = {}
    for c in result.ranked + result.rejected:
        for p in c.curve:
            if p["tpot_ms"] > 0:
                by_config.setdefault(c.config, []).append(p)
    for config, pts in by_config.items():
        ax.scatter([1000.0 / p["tpot_ms"] for p in pts], [p["tok_s_per_gpu"] for p in pts], s=10, label=config)
    if result.pareto:
        ax.plot(
            [p["tok_s_per_user"] for p in result.pareto],
            [p["tok_s_per_gpu"] for p in result.pareto],
            color="black",
            linewidth=1,
            label="Pareto front",
        )
    ax.set_xlabel("tokens/s per user (1000 ÷ TPOT)")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(f"{result.spec}: {result.traffic} — estimate: {result.estimator}", fontsize=9)
    if by_config and len(by_config) <= 12:
        ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
