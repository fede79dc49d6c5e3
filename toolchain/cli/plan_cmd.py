"""`toolchain plan`: memory fit, KV concurrency, TPOT floor and fleet size per cell."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from toolchain.cli.options import CellOpt, JsonOpt, SpecArg


def plan(
    spec: SpecArg,
    cell: CellOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="Print the formulas with the numbers")] = False,
    measured: Annotated[
        Path | None,
        typer.Option(
            "--measured",
            help="Size the fleet from a `bench --slo-search` result's knee (beside the roofline)",
        ),
    ] = None,
    estimator: Annotated[
        str,
        typer.Option(
            "--estimator",
            help="floor: the roofline only (the default); aic: NVIDIA AIConfigurator's measured database beside "
            "the floor (scripts/setup-aic.sh); auto: aic when installed, else the floor with a note",
        ),
    ] = "floor",
    wide: Annotated[bool, typer.Option("--wide", help="Every column (memory terms too)")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Does each cell fit its GPU, how many requests fit the KV budget, the TPOT floor, the fleet size.

    The floor is physics (a lower bound); the estimate is NVIDIA AIConfigurator's measured per-kernel database.
    Fleets are sized at the largest batch that meets the SLOs; the floor's fleet is the lower bound.

    Examples: toolchain plan engine_specs/llama-3.3-70b-fp8-h200.yaml --explain
              toolchain plan engine_specs/llama-3.1-8b-fp8.yaml --estimator floor --wide
              toolchain plan engine_specs/llama-3.1-8b-fp8.yaml --measured knee.json
    """
    from toolchain.errors import UserInputError

    if estimator not in ("auto", "aic", "floor"):
        raise UserInputError(f"--estimator {estimator!r} is not one of auto, aic, floor", "use --estimator auto")
    if measured is not None:
        from toolchain.cli.render import print_json
        from toolchain.pipeline.measured import plan_measured

        m = plan_measured(spec, measured, cell)
        if json_out:
            print_json(m)
        else:
            _print_measured(m)
        return

    from toolchain.cli.render import err, out, print_json
    from toolchain.errors import PlanError
    from toolchain.planning.plan import explain as explain_plan
    from toolchain.planning.spec_plan import plan_spec
    from toolchain.specs.gate import checked_spec

    def progress(message: str) -> None:
        err.print(f"plan: {message}", markup=False, highlight=False)

    # the rules `spec validate` applies (specs.gate)
    sp = plan_spec(checked_spec(spec), cell, estimator=estimator, progress=progress)  # type: ignore[arg-type]
    s, arch, plans = sp.spec, sp.arch, sp.plans
    if sp.unused_config_fields:
        err.print(
            f"note: config.json fields the planner does not use: {', '.join(sp.unused_config_fields)}",
            highlight=False,
        )
    for note in sp.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if json_out:
        print_json(sp.to_json())
    else:
        out.print(_table(s.name, arch.name, arch.params, plans, wide))
        err.print(
            f"assumptions: MFU {plans[0].mfu:.0%} for prefill; weights read once per decode step; "
            "memory = marketed decimal GB; see --explain for every formula",
            highlight=False,
        )
        sources = sorted({f"{p.estimate['estimator']} ({p.estimate['database']})" for p in plans if p.estimate})
        if sources:
            err.print(f"estimate: {'; '.join(sources)}; floor: roofline (HBM bandwidth)", highlight=False)
        if explain:
            for p in plans:
                out.print(explain_plan(p, arch), markup=False, highlight=False)
    for p in plans:
        for w in p.warnings:
            err.print(f"warning: cell {p.cell_id}: {w}", markup=False, highlight=False)
    errors = sp.errors
    if errors:
        for cid, e in errors[:-1]:
            err.print(f"Error: cell {cid}: {e}", markup=False, highlight=False)
        cid, e = errors[-1]
        raise PlanError(f"cell {cid}: {e}")


def _table(name: str, model: str, params: float, plans: list[Any], wide: bool) -> Any:
    """The plan table: compact (fits 80 columns) or ``wide`` (every memory term)."""
    from rich.table import Table

    from toolchain.cli.render import fmt_bytes

    t = Table(title=f"plan: {name} ({model}, {params / 1e9:.2f} B params)")

    def est(p: Any, key: str, fmt: str) -> str:
        at = p.estimate["at_batch"] if p.estimate else None
        return format(at[key], fmt) if at else "-"

    def gpus(p: Any) -> str:
        floor = str(p.fleet["total_gpus"]) if p.fleet else "-"
        if p.fleet_estimate:
            return f"{p.fleet_estimate['total_gpus']} (≥{floor})"
        return f"≥{floor}" if p.fleet else "-"

    def b1(p: Any) -> str:
        e = f"{p.estimate['batch_1']['tpot_ms']:.2f}" if p.estimate else "-"
        return f"{p.tpot_floor_b1_ms:.2f} / {e}"

    def batch(p: Any) -> str:
        at = p.estimate["at_batch"] if p.estimate else None
        return str(at["batch"]) if at else (str(p.batch_at_sla) if p.batch_at_sla else "-")

    if wide:
        columns = ["cell", "weights/GPU", "KV budget", "KV/token", "max conc @max_seq", "@avg ctx"]
        columns += ["TPOT b=1 floor / est ms", "TPOT floor @KV batch", "prefill floor", "batch"]
        columns += ["TPOT est", "TTFT est", "tok/s/GPU est", "GPUs est (floor)"]
        for c in columns:
            t.add_column(c)
        for p in plans:
            t.add_row(
                p.cell_id,
                fmt_bytes(p.weight_bytes_per_gpu),
                fmt_bytes(p.kv_budget_bytes),
                f"{p.kv_bytes_per_token / 1e3:.1f} KB",
                str(p.max_concurrency_at_max_seq),
                str(p.max_concurrency_at_avg),
                b1(p),
                f"{p.tpot_floor_kv_batch_ms:.2f} ms (b={p.kv_batch})",
                f"{p.prefill_ms_avg_input:.1f} ms",
                batch(p),
                est(p, "tpot_ms", ".2f"),
                est(p, "ttft_ms", ".0f"),
                est(p, "tok_s_per_gpu", ",.0f"),
                gpus(p),
            )
        return t
    for c in ("cell", "conc @avg", "TPOT b=1 floor/est ms", "batch", "TPOT est ms", "TTFT est ms", "GPUs (floor)"):
        t.add_column(c, overflow="fold")
    for p in plans:
        t.add_row(
            p.cell_id,
            str(p.max_concurrency_at_avg),
            b1(p),
            batch(p),
            est(p, "tpot_ms", ".2f"),
            est(p, "ttft_ms", ".0f"),
            gpus(p),
        )
    return t


def _print_measured(m: dict[str, Any]) -> None:
    """The measured fleet beside the roofline's, and the arithmetic of the measured one."""
    from rich.table import Table

    from toolchain.cli.render import err, out

    mf, rf = m["measured_fleet"], m["roofline_fleet"]
    t = Table(title=f"fleet for {m['cell']} ({m['gpu']}): measured knee vs roofline")
    for col in ("", "measured (SLO knee)", "roofline", "measured ÷ roofline"):
        t.add_column(col)
    ratio = m["ratio_tok_s_per_instance"]
    t.add_row(
        "tok/s per instance",
        f"{mf['tok_s_per_instance']:,.1f} at {m['knee']['label']}",
        f"{rf['tok_s_per_instance']:,.1f}" if rf else "-",
        f"{ratio:.2f}" if ratio is not None else "-",
    )
    t.add_row(
        "fleet GPUs",
        str(mf["total_gpus"]),
        str(rf["total_gpus"]) if rf else "-",
        f"{m['ratio_gpus']:.2f}" if m["ratio_gpus"] is not None else "-",
    )
    t.add_row("instances", str(mf["total_instances"]), str(rf["total_instances"]) if rf else "-", "")
    out.print(t)
    err.print(
        f"measured: peak {mf['peak_tok_s']:,.0f} tok/s ÷ {mf['tok_s_per_instance']:,.1f} tok/s per instance "
        f"= {mf['raw_instances']:.2f} instances × {mf['gpus_per_instance']} GPUs ÷ utilization × headroom "
        f"= {mf['total_gpus']} GPUs; search: {m['search']['slo']} ({m['search']['mode']})",
        highlight=False,
        markup=False,
    )
    for note in m["notes"]:
        err.print(f"note: {note}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command()(plan)
