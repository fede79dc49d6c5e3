"""`toolchain plan SPEC --measured RESULT.json`: size the fleet from one instance's measured capacity.

The roofline planner's step 2, "per-instance decode capacity at the SLO", is 1000 / TPOT target × batch at
the SLO. Here it is the output-token throughput of the SLO search's knee instead (`toolchain bench
--slo-search`): the highest load one instance carried while meeting the SLOs. Steps 1 and 3 are the same:

    peak tok/s  = traffic.peak_rps × mean output tokens
    instances   = peak tok/s ÷ measured tok/s per instance
    GPUs        = ceil(instances × GPUs per instance ÷ target_utilization × burst_headroom)

A measurement sizes only the engine it measured: the result must name the spec's cell, GPU and engine key
(written by `bench --spec` or `bench --repo` from the repository's marker), and it must not have been
served by the CPU reference model — such a result is refused, with what it would have given, so that no CPU
number is mistaken for an H100's.

With the silicon estimate (`--estimator auto`, the default, or `aic`), the plan also says how far NVIDIA
AIConfigurator's estimate is from this measurement at every probe of a concurrency search (estimate ÷ measured
TTFT and TPOT P99, and output tokens/s): the factor to read the database's figures for this engine with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain.artifacts.bench_result import BenchResult, Knee, Provenance, Search, read_result
from toolchain.errors import PlanError, UserInputError
from toolchain.planning.estimate import Estimator
from toolchain.planning.perf import ceil_clean
from toolchain.planning.plan import CellPlan
from toolchain.specs.arch import ModelArch
from toolchain.specs.models import EngineSpec

HINT = "measure the spec's own engine: `toolchain bench --spec SPEC --cell ID --slo-search concurrency --save R.json`"


class MeasurementRefused(PlanError):
    """A measured result that cannot size this spec's fleet (another engine, or the CPU stand-in)."""


def load_measurement(path: Path) -> tuple[BenchResult, Search, Knee]:
    """A bench result with an SLO-search knee, its search and its knee (each problem a one-line UserInputError)."""
    res = read_result(path)
    search = res.search
    if search is None:
        raise UserInputError(
            f"{path} holds fixed load points, not an SLO search, so it has no measured capacity at the SLO",
            "run `toolchain bench ... --slo-search concurrency --save R.json` and pass that file",
        )
    if search.knee is None:
        raise UserInputError(
            f"{path}: the SLO search found no load that met the SLOs ({search.message})",
            "fix the deployment or the SLOs and search again",
        )
    tps = search.knee.output_token_throughput_tps
    if tps is None or not tps > 0:
        raise UserInputError(f"{path}: the knee has no positive output-token throughput", HINT)
    return res, search, search.knee


def _fleet(
    peak_tok_s: float, per_instance: float, gpus_per_instance: int, util: float, headroom: float
) -> dict[str, Any]:
    raw = peak_tok_s / per_instance
    total = ceil_clean(raw * gpus_per_instance / util * headroom)
    instances = -(-total // gpus_per_instance)
    return {
        "peak_tok_s": peak_tok_s,
        "tok_s_per_instance": per_instance,
        "raw_instances": raw,
        "raw_gpus": raw * gpus_per_instance,
        "total_instances": instances,
        "total_gpus": instances * gpus_per_instance,
        "gpus_per_instance": gpus_per_instance,
        "utilization": util,
        "headroom": headroom,
    }


def _identity_problems(prov: Provenance, spec: EngineSpec, plan: CellPlan, engine_key: str | None) -> list[str]:
    """Why the result is not a measurement of this cell's engine (empty when it is)."""
    problems = []
    if prov.spec not in (None, spec.name):
        problems.append(f"it measured spec {prov.spec!r}, not {spec.name!r}")
    if not prov.cell:
        problems.append("it does not say which cell it measured (bench ran without --spec or --repo)")
    elif prov.cell != plan.cell_id:
        problems.append(f"it measured cell {prov.cell!r}, not {plan.cell_id!r}")
    if prov.gpu not in (None, plan.gpu):
        problems.append(f"it measured on {prov.gpu}, the cell runs on {plan.gpu}")
    if engine_key is not None and prov.engine_key and prov.engine_key != engine_key:
        problems.append(f"its engine key {prov.engine_key[:12]} is not this cell's {engine_key[:12]}")
    return problems


def plan_measured(
    spec_path: Path,
    result_path: Path,
    cell_id: str | None = None,
    *,
    estimator: Estimator = "floor",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Load the spec and the result, plan the spec's cells, and size the measured cell's fleet from its knee; with
    ``estimator`` "auto"/"aic", also the silicon estimate ÷ the measurement at every probe of the search (the
    estimate's calibration on this engine)."""
    from toolchain.planning.spec_plan import plan_spec
    from toolchain.specs.loader import load_spec

    res, _, _ = load_measurement(result_path)
    spec = load_spec(spec_path)
    sp = plan_spec(spec)
    out = measured_plan(spec, sp.plans, res, cell_id, label=result_path.name.removesuffix(".json"))
    if estimator != "floor":
        out["calibration"] = calibration(spec, sp.arch, out["cell"], res, estimator, progress)
    return out


def calibration(
    spec: EngineSpec,
    arch: ModelArch,
    cell_id: str,
    res: BenchResult,
    estimator: Estimator,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """NVIDIA AIConfigurator's estimate ÷ the measurement at every probe of a concurrency search: TTFT and TPOT (the
    estimate's figure against the measured P99) and output tokens/s. ``{"none": why}`` where there is nothing to
    compare (a rate search, a cell the database lacks, AIConfigurator not installed)."""
    from toolchain.planning import estimate as E
    from toolchain.specs.matrix import find_cell

    search = res.search
    assert search is not None  # measured_plan checked it
    if search.mode != "concurrency":
        return {"none": "a rate search has no batch to estimate at; calibrate with --slo-search concurrency"}
    cell = find_cell(spec, cell_id)
    q = cell.spec.quantization
    why = E.unsupported(cell.gpu.name, q.weights, arch, cell.pp)
    if why is not None:
        return {"none": why}
    session = E.open_session(spec, arch, estimator, progress)
    if session is None:
        return {"none": E.missing_message()}
    system = E.SYSTEMS[cell.gpu.name]
    isl, osl = E.lengths(cell)
    rows: list[dict[str, Any]] = []
    database = None
    try:
        for probe in sorted({int(p.load): p for p in search.probes}.values(), key=lambda p: p.load):
            e = session.ask(E.query(cell, max(1, int(probe.load))))
            if isinstance(e, str):
                rows.append({"load": probe.load, "label": probe.label, "none": e})
                continue
            database = e.database
            rows.append(
                {
                    "load": probe.load,
                    "label": probe.label,
                    "estimate": {"ttft_ms": e.ttft_ms, "tpot_ms": e.tpot_ms, "tok_s": e.tok_s},
                    "measured": {
                        "ttft_ms_p99": probe.ttft_ms_p99,
                        "tpot_ms_p99": probe.tpot_ms_p99,
                        "tok_s": probe.output_token_throughput_tps,
                    },
                    "ttft_ratio": E.ratio(e.ttft_ms, probe.ttft_ms_p99),
                    "tpot_ratio": E.ratio(e.tpot_ms, probe.tpot_ms_p99),
                    "tok_s_ratio": E.ratio(e.tok_s, probe.output_token_throughput_tps),
                }
            )
    finally:
        session.close()
    return {
        "estimator": session.estimator,
        "database": database,
        "system": system,
        "isl": isl,
        "osl": osl,
        "rows": rows,
    }


def measured_plan(
    spec: EngineSpec, plans: list[CellPlan], res: BenchResult, cell_id: str | None, *, label: str | None = None
) -> dict[str, Any]:
    """The fleet the measured knee implies for the cell it measured, beside the roofline's, with their ratio.

    ``res`` holds an SLO search with a knee (load_measurement checks that)."""
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.matrix import find_cell

    search, knee = res.search, res.search.knee if res.search else None
    if search is None or knee is None or knee.output_token_throughput_tps is None:
        raise UserInputError("the bench result has no SLO-search knee to size a fleet from", HINT)
    prov = res.provenance
    want = cell_id or prov.cell
    plan = next((p for p in plans if p.cell_id == want), None)
    if plan is None:
        ids = ", ".join(p.cell_id for p in plans)
        raise MeasurementRefused(
            f"the measurement is of cell {want!r}, which is not a cell of {spec.name} ({ids})"
            if want
            else "the measurement does not say which cell it measured (bench ran without --spec or --repo)",
            HINT,
        )
    if spec.traffic is None:
        raise UserInputError(f"spec {spec.name} has no traffic section, so there is no fleet to size", "add traffic")
    art = for_cell(find_cell(spec, plan.cell_id))
    key = art.engine_key
    measured = knee.output_token_throughput_tps
    traffic = spec.traffic
    peak = traffic.peak_rps * traffic.output_tokens.mean
    gpi = plan.tp * plan.pp
    fleet = _fleet(peak, measured, gpi, traffic.target_utilization, traffic.burst_headroom)
    roof = plan.fleet
    out: dict[str, Any] = {
        "cell": plan.cell_id,
        "gpu": plan.gpu,
        "result": label,
        "search": {"mode": search.mode, "slo": search.slo_text, "status": search.status},
        "knee": {
            "load": knee.load,
            "label": knee.label,
            "output_token_throughput_tps": measured,
            "request_throughput_rps": knee.request_throughput_rps,
            "ttft_ms_p99": knee.ttft_ms_p99,
            "tpot_ms_p99": knee.tpot_ms_p99,
        },
        "measured_fleet": fleet,
        "roofline_fleet": roof,
        "ratio_tok_s_per_instance": (measured / roof["tok_s_per_instance"]) if roof else None,
        "ratio_gpus": (fleet["total_gpus"] / roof["total_gpus"]) if roof and roof["total_gpus"] else None,
        "engine_key_checked": key is not None,
        "notes": _notes(spec, prov, search, key, art.pending),
    }
    problems = _identity_problems(prov, spec, plan, key)
    reference = prov.reference
    if reference:
        problems.insert(0, f"it was served by the {reference}")
    if problems:
        n = fleet["total_gpus"]
        would = (
            f"it would size {n} GPU{'' if n == 1 else 's'} from {measured:,.1f} tok/s per instance at "
            f"{knee.label}{_unfinished(search)}" + (f" (roofline: {roof['total_gpus']})" if roof else "")
        )
        raise MeasurementRefused(
            f"the measurement cannot size the {plan.gpu} fleet of cell {plan.cell_id}: {'; '.join(problems)}; "
            f"{would}, but that number says nothing about this engine on this GPU",
            HINT,
        )
    return out


def _unfinished(s: Search) -> str:
    """Beside a quoted knee figure: that the search did not find a knee, when it did not."""
    if s.status == "bound":
        return ", where the search hit its bound (no knee within the bounds: the SLOs still held there)"
    if s.status == "probe-limit":
        return ", where the search hit its probe limit (the knee lies above it)"
    return ""


def _notes(spec: EngineSpec, prov: Provenance, s: Search, key: str | None, pending: str | None) -> list[str]:
    """What the reader should know: an unchecked engine key, another workload, other SLOs, the search bound."""
    notes = []
    if key is None:
        notes.append(f"engine key not checked ({pending}); the cell and GPU match")
    elif not prov.engine_key:
        notes.append("the result names no engine key; the cell and GPU match")
    work = prov.workload
    traffic = spec.traffic
    if traffic is not None and work.model_fields_set:
        from toolchain.bench.setup import dist_text

        want = (dist_text(traffic.input_tokens), dist_text(traffic.output_tokens))
        got = (work.input_tokens, work.output_tokens)
        if got != want:
            notes.append(
                f"measured with input/output tokens {got[0]}/{got[1]}, the spec's traffic is {want[0]}/{want[1]}: "
                "the capacity holds for the measured shape"
            )
    slo = s.slo.model_dump() if s.slo else {}
    spec_slo = {
        "ttft_ms": spec.slo.ttft_ms.p99 or spec.slo.ttft_ms.p50,
        "tpot_ms": spec.slo.tpot_ms.p99 or spec.slo.tpot_ms.p50,
    }
    for k, v in spec_slo.items():
        if v is not None and slo.get(k) is not None and slo[k] > v:
            notes.append(f"the search allowed {k} {slo[k]:g}, looser than the spec's {v:g}: the fleet may be too small")
    if s.status == "bound":
        notes.append(
            "no knee within the bounds: the SLOs held up to the search bound, the knee is higher, so this fleet "
            "is an upper bound (raise --slo-max and measure again)"
        )
    if s.status == "probe-limit":
        notes.append("the search stopped at its probe limit: the knee lies between the measured bracket")
    return notes
