"""`toolchain plan`: memory fit, KV concurrency, TPOT floor and fleet size per cell."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from toolchain.cli.options import CellOpt, Estimator, EstimatorOpt, JsonOpt, SpecArg


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
    estimator: EstimatorOpt = Estimator.auto,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (memory terms too)")] = False,
    search: Annotated[
        bool,
        typer.Option("--search", help="Search GPU × weight format × TP × max batch for the spec's traffic and SLOs"),
    ] = False,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="With --search: comma-separated catalog GPUs (default: all)")
    ] = None,
    formats: Annotated[
        str | None,
        typer.Option(
            "--formats",
            help="With --search: comma-separated weight formats (default: the spec's, bf16, fp8, int4_awq, nvfp4)",
        ),
    ] = None,
    tps: Annotated[
        str | None, typer.Option("--tps", help="With --search: comma-separated TP sizes (default 1,2,4,8)")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="With --search: how many ranked candidates to print", min=1)] = 5,
    price: Annotated[
        list[str] | None,
        typer.Option("--price", help="With --search: GPU=USD per GPU-hour (repeat); ranks by $/h"),
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option("--write", help="With --search: write the best candidate as a spec (its matrix) to this file"),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="With --search: save the Pareto plot (PNG) to this file")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Does each cell fit its GPU, how many requests fit the KV budget, TPOT and TTFT, the fleet size.

    Two estimators side by side: the floor is physics (HBM bandwidth, a lower bound); the estimate is NVIDIA
    AIConfigurator's measured per-kernel database. Fleets are sized at the largest batch that meets the SLOs;
    the floor's fleet is the lower bound. --search ranks configurations instead of planning the spec's cells.

    Examples: toolchain plan engine_specs/llama-3.3-70b-fp8-h200.yaml --explain
              toolchain plan engine_specs/llama-3.1-8b-fp8.yaml --estimator floor --wide
              toolchain plan engine_specs/llama-3.1-8b-fp8.yaml --search --write picked.yaml
              toolchain plan engine_specs/llama-3.1-8b-fp8.yaml --measured knee.json
    """
    from toolchain.errors import UserInputError

    search_only = {"--gpus": gpus, "--formats": formats, "--tps": tps, "--price": price, "--write": write}
    search_only["--plot"] = plot
    if not search:
        given = [k for k, v in search_only.items() if v]
        if given:
            raise UserInputError(f"{given[0]} applies to --search only", f"add --search, or drop {given[0]}")
    elif measured is not None or cell is not None:
        raise UserInputError("--search ranks configurations, not the spec's cells", "drop --cell / --measured")
    if measured is not None:
        from toolchain.cli.render import print_json
        from toolchain.pipeline.measured import plan_measured

        m = plan_measured(spec, measured, cell, estimator=estimator.value, progress=_progress)
        if json_out:
            print_json(m)
        else:
            _print_measured(m)
        return
    if search:
        _search(spec, estimator.value, gpus, formats, tps, top, price or [], write, plot, json_out)
        return

    from toolchain.cli.render import err, out, print_json, print_wrapped
    from toolchain.errors import PlanError
    from toolchain.planning.estimate import modes_line, provenance_line
    from toolchain.planning.plan import explain as explain_plan
    from toolchain.planning.spec_plan import plan_spec
    from toolchain.specs.gate import checked_spec

    # the rules `spec validate` applies (specs.gate)
    sp = plan_spec(checked_spec(spec), cell, estimator=estimator.value, progress=_progress)
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
        if wide:
            _wide(s.name, arch.name, arch.params, plans)
        else:
            out.print(_table(s.name, arch.name, arch.params, plans))
        source, modes = provenance_line(plans), modes_line(plans)
        out.print(
            f"floor: roofline (HBM bandwidth; prefill at {plans[0].mfu:.0%} MFU), a lower bound\n"
            f"est:   {source or 'none: every figure is the floor'}"
            + (f"\nmodes: {modes} (the checkpoint's quantization)" if modes else ""),
            markup=False,
            highlight=False,
        )
        err.print(
            "GPUs: with the spec's utilization target and burst headroom"
            + ("" if explain else "; formulas: --explain"),
            highlight=False,
        )
        if explain:
            for p in plans:
                print_wrapped(explain_plan(p, arch))
    for p in plans:
        for w in p.warnings:
            err.print(f"warning: cell {p.cell_id}: {w}", markup=False, highlight=False)
    errors = sp.errors
    if errors:
        for cid, e in errors[:-1]:
            err.print(f"Error: cell {cid}: {e}", markup=False, highlight=False)
        cid, e = errors[-1]
        raise PlanError(f"cell {cid}: {e}")


def _progress(message: str) -> None:
    """Narration on a terminal only (the first query of each GPU loads its database: seconds)."""
    from toolchain.cli.render import err

    if err.is_terminal:
        err.print(f"plan: {message}", markup=False, highlight=False)


def _csv(value: str | None, what: str, cast: Any = str) -> list[Any] | None:
    from toolchain.errors import UserInputError

    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        return [cast(v) for v in items] or None
    except ValueError as e:
        raise UserInputError(f"{what} {value!r}: {e}", f"give a comma-separated list, e.g. {what} 1,2,4") from e


def _search(
    spec: Path,
    estimator: str,
    gpus: str | None,
    formats: str | None,
    tps: str | None,
    top: int,
    price: list[str],
    write: Path | None,
    plot: Path | None,
    json_out: bool,
) -> None:
    """`plan --search`: rank, print the top and the Pareto front, write the best as a spec."""
    from typing import get_args

    from toolchain.cli.render import Stages, err, print_json
    from toolchain.errors import PlanError, UserInputError
    from toolchain.planning.search import parse_prices, search_spec, write_plot, write_spec
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.models import WeightFormat

    fmt_list = _csv(formats, "--formats")
    known = get_args(WeightFormat)
    for f in fmt_list or []:
        if f not in known:
            raise UserInputError(f"--formats: {f!r} is not a weight format", f"use {', '.join(known)}")
    result = search_spec(
        checked_spec(spec),
        gpus=_csv(gpus, "--gpus"),
        formats=fmt_list,
        tps=_csv(tps, "--tps", int),
        prices=parse_prices(price),
        estimator=estimator,  # type: ignore[arg-type]
        progress=Stages(quiet=json_out),
    )
    Stages.settle_all()
    for note in result.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    best = result.best
    written = write_spec(spec, write, best, result) if write is not None and best is not None else None
    plotted = write_plot(result, plot) if plot is not None else None
    if json_out:
        print_json(
            {
                **result.to_json(),
                "written": str(written) if written else None,
                "plot": str(plotted) if plotted else None,
            }
        )
    else:
        _print_search(result, top, bool(price))
        if written:
            err.print(
                f"wrote {written}: {best.config if best else ''}, max batch "
                f"{best.max_batch_size if best else ''} (check it: toolchain spec validate {written})",
                markup=False,
                highlight=False,
            )
        if plotted:
            err.print(f"wrote the Pareto plot to {plotted}", markup=False, highlight=False)
    if best is None:
        why = result.rejected[0].rejected if result.rejected else "no candidate"
        raise PlanError(
            f"no configuration serves {result.traffic} at {result.slo} (first refusal: {why})",
            "relax the SLO, widen --gpus/--formats/--tps, or lower the traffic",
        )


def _print_search(result: Any, top: int, priced: bool) -> None:
    """The ranking, the Pareto front and the refusals, each reason once with its count; every line fits 80
    columns on the catalog's GPUs."""
    import textwrap

    from toolchain.cli.render import out, print_table
    from toolchain.planning.plan import modes_text

    head = f"search: {result.spec} ({result.model}) for {result.traffic} at {result.slo}"
    out.print("\n".join(textwrap.wrap(head, 80, subsequent_indent="  ")), markup=False, highlight=False)
    cols = ["#", "config (weights/KV)", "batch", "GPUs", "TPOT ms", "TTFT ms", "tok/s/GPU"]
    cols += ["$/h"] if priced else []
    rows = []
    for i, c in enumerate(result.ranked[:top], 1):
        row = [
            str(i),
            _short(c),
            str(c.max_batch_size),
            f"{c.gpus} (≥{c.floor_gpus})",
            f"{c.tpot_ms:.2f}",
            f"{c.ttft_ms:.0f}",
            f"{c.tok_s_per_gpu:,.0f}",
        ]
        rows.append(row + ([f"{c.cost_per_h:,.2f}" if c.cost_per_h is not None else "-"] if priced else []))
    print_table(f"ranked on {result.estimator} (GPUs: est (≥floor))", cols, rows or [["-"] * len(cols)])
    for i, c in enumerate(result.ranked[:top], 1):
        if c.modes:
            out.print(f"#{i} AIConfigurator ran {modes_text(c.modes)}", markup=False, highlight=False)
    if result.pareto:
        prow = [
            [
                p["config"].replace(" KV ", "/"),
                str(p["batch"]),
                f"{p['tok_s_per_gpu']:,.0f}",
                f"{p['tok_s_per_user']:.1f}",
                "yes" if p["meets_slo"] else "no",
            ]
            for p in result.pareto
        ]
        print_table(
            "Pareto front (tok/s per GPU vs tok/s per user)",
            ["config (weights/KV)", "batch", "tok/s/GPU", "tok/s/user", "meets SLO"],
            prow,
        )
    if result.floor_only:
        best = result.floor_only[0]
        label = "ranked on the floor" if result.estimator == "floor" else "no silicon data, floor only (lower bound)"
        _say(f"{len(result.floor_only)} configurations {label}; best: {_short(best)} ≥{best.floor_gpus} GPUs")
    refusals = result.refusals()
    kinds = {"invalid": "cannot be built", "fit": "do not fit in memory", "slo": "miss the SLOs"}
    counts = {k: sum(n for kk, _, n in refusals if kk == k) for k in kinds}
    said = [f"{counts[k]} {kinds[k]}" for k in kinds if counts[k]]
    if said:
        _say(f"refused: {', '.join(said)} (each reason once below; all: --json)")
    for kind, why, n in refusals:
        _say(f"  {n:>3} {kinds.get(kind, kind)}: {why}", indent="        ")


def _short(c: Any) -> str:
    return f"{c.gpu} {c.weights}/{c.kv_cache} TP{c.tp}"


def _say(text: str, indent: str = "  ") -> None:
    """One line of the summary on stderr, wrapped at 80 columns."""
    import textwrap

    from toolchain.cli.render import err

    for line in textwrap.wrap(text, 80, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False):
        err.print(line, markup=False, highlight=False, soft_wrap=True)


def _at(p: Any) -> dict[str, Any] | None:
    return p.estimate["at_batch"] if p.estimate else None


def _est(p: Any, key: str, fmt: str) -> str:
    a = _at(p)
    return format(a[key], fmt) if a else "-"


def _batch(p: Any) -> str:
    a = _at(p)
    return str(a["batch"]) if a else (str(p.batch_at_sla) if p.batch_at_sla else "-")


def _tpot(p: Any) -> str:
    """Floor / estimate TPOT at the batch the cell runs (the estimate's batch, else the floor's)."""
    a = _at(p)
    if a:
        return f"{p.estimate['floor_tpot_at_batch_ms']:.2f} / {a['tpot_ms']:.2f}"
    floor = p.tpot_floor_at_sla_ms if p.tpot_floor_at_sla_ms is not None else p.tpot_floor_kv_batch_ms
    return f"{floor:.2f} / -"


def _gpus(p: Any) -> str:
    floor = str(p.fleet["total_gpus"]) if p.fleet else "-"
    if p.fleet_estimate:
        return f"{p.fleet_estimate['total_gpus']} (≥{floor})"
    return f"- (≥{floor})" if p.fleet else "-"


def _title(name: str, model: str, params: float) -> str:
    return f"plan: {name} ({model}, {params / 1e9:.2f} B params)"


def _wide(name: str, model: str, params: float, plans: list[Any]) -> None:
    """Every memory term, batch 1 too: a table where the terminal is wide enough, else one record per cell
    (render.print_table), every value whole."""
    from toolchain.cli.render import fmt_bytes, print_table

    columns = ["cell", "weights/GPU", "KV budget", "KV/token", "max conc @max_seq", "@avg ctx"]
    columns += ["TPOT b=1 ms floor / est", "batch", "TPOT ms floor / est", "prefill floor", "TTFT est ms"]
    columns += ["tok/s/GPU est", "memory est", "GPUs est (≥floor)"]
    rows = []
    for p in plans:
        a = _at(p)
        b1 = f"{p.estimate['batch_1']['tpot_ms']:.2f}" if p.estimate else "-"
        rows.append(
            [
                p.cell_id,
                fmt_bytes(p.weight_bytes_per_gpu),
                fmt_bytes(p.kv_budget_bytes),
                f"{p.kv_bytes_per_token / 1e3:.1f} KB",
                str(p.max_concurrency_at_max_seq),
                str(p.max_concurrency_at_avg),
                f"{p.tpot_floor_b1_ms:.2f} / {b1}",
                _batch(p),
                _tpot(p),
                f"{p.prefill_ms_avg_input:.1f} ms",
                _est(p, "ttft_ms", ".0f"),
                _est(p, "tok_s_per_gpu", ",.0f"),
                f"{a['memory_gb']:.1f} GB" if a else "-",
                _gpus(p),
            ]
        )
    print_table(_title(name, model, params), columns, rows)


def _table(name: str, model: str, params: float, plans: list[Any]) -> Any:
    """The plan table, fitting 80 columns: floor and estimate at the batch each cell runs."""
    from rich.table import Table

    t = Table(title=_title(name, model, params))
    t.add_column("cell", no_wrap=True)
    for c in ("batch", "TPOT ms\nfloor / est", "TTFT ms\nest", "GPUs\nest (≥floor)"):
        t.add_column(c, justify="right")
    for p in plans:
        t.add_row(p.cell_id, _batch(p), _tpot(p), _est(p, "ttft_ms", ".0f"), _gpus(p))
    return t


def _print_measured(m: dict[str, Any]) -> None:
    """The measured fleet beside the roofline's, and the arithmetic of the measured one."""
    from rich.table import Table

    from toolchain.cli.render import err, out
    from toolchain.planning.perf import fleet_arithmetic

    mf, rf = m["measured_fleet"], m["roofline_fleet"]
    status = m["search"].get("status")
    found = status == "found"
    t = Table(title=f"fleet for {m['cell']} ({m['gpu']}): measured {'knee' if found else 'SLO search'} vs roofline")
    for col in ("", "measured (SLO knee)" if found else "measured (no knee)", "roofline", "measured ÷ roofline"):
        t.add_column(col)
    ratio = m["ratio_tok_s_per_instance"]
    endings = {"found": "", "bound": " (search bound)", "probe-limit": " (probe limit)"}
    where = endings.get(str(status), f" ({status})")
    t.add_row(
        "tok/s per instance",
        f"{mf['tok_s_per_instance']:,.1f} at {m['knee']['label']}{where}",
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
        f"measured: {fleet_arithmetic(mf)}; search: {m['search']['slo']} ({m['search']['mode']})",
        highlight=False,
        markup=False,
    )
    for note in m["notes"]:
        err.print(f"note: {note}", highlight=False, markup=False)
    cal = m.get("calibration")
    if cal is not None:
        _print_calibration(cal)


def _print_calibration(cal: dict[str, Any]) -> None:
    """The silicon estimate ÷ the measurement at every probe: how to read the database's figures for this engine."""
    from rich import box
    from rich.table import Table

    from toolchain.cli.render import err, out

    if "none" in cal:
        err.print(f"note: no calibration of the silicon estimate: {cal['none']}", highlight=False, markup=False)
        return

    def cell(est: float | None, meas: float | None, ratio: float | None, fmt: str) -> str:
        if est is None or meas is None or ratio is None:
            return "-"
        return f"{est:{fmt}} / {meas:{fmt}} = {ratio:.2f}"

    t = Table(
        title=f"estimate ÷ measured per probe ({cal['estimator']}, {cal['database']} on {cal['system']})",
        box=box.SIMPLE_HEAVY,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("load", "TTFT ms est / p99", "TPOT ms est / p99", "tok/s est / measured"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in cal["rows"]:
        if "none" in r:
            t.add_row(f"{r['load']:g}", "no estimate", "", "")
            continue
        e, mm = r["estimate"], r["measured"]
        t.add_row(
            f"{r['load']:g}",
            cell(e["ttft_ms"], mm["ttft_ms_p99"], r["ttft_ratio"], ".1f"),
            cell(e["tpot_ms"], mm["tpot_ms_p99"], r["tpot_ratio"], ".2f"),
            cell(e["tok_s"], mm["tok_s"], r["tok_s_ratio"], ",.0f"),
        )
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command()(plan)
