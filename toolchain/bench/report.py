"""Bench reports: Markdown and HTML (Jinja2 templates), CSV, and PNG plots (matplotlib).

Several result files are compared side by side, each under its label (``LABEL=PATH`` on the command
line, else the file name). Plots: TTFT / TPOT / ICL percentiles against the load (concurrency or
rate) on separate axes with the SLO lines and the planner floor, points labelled by load; latency
CDFs; inter-chunk latency per load; throughput against latency.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain._deps import require
from toolchain.artifacts.bench_result import BenchResult, LoadPoint, Search, Stats, read_result
from toolchain.bench.metrics import AIPERF_NAMES, DEFINITIONS
from toolchain.units import fmt_ms

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Labelled:
    """A bench result under the label a report shows it by."""

    label: str
    result: BenchResult


def labelled(results: Sequence[Labelled | BenchResult]) -> list[Labelled]:
    """Results as reports take them: an unlabelled one is ``result N`` (its place, from 1)."""
    return [r if isinstance(r, Labelled) else Labelled(f"result {i + 1}", r) for i, r in enumerate(results)]


def load_results(paths: list[Path], labels: list[str] | None = None) -> list[Labelled]:
    """Read result files through the result model (toolchain.artifacts.bench_result: a damaged or newer file is a
    one-line UserInputError naming it and its first bad field), each under its label (given, else the file name
    without .json)."""
    return [
        Labelled(
            labels[i] if labels and i < len(labels) and labels[i] else p.name.removesuffix(".json"), read_result(p)
        )
        for i, p in enumerate(paths)
    ]


def parse_labelled(args: list[str]) -> tuple[list[Path], list[str]]:
    """``LABEL=PATH`` or ``PATH`` arguments -> paths and labels (the file name when no label is given)."""
    paths, labels = [], []
    for a in args:
        label, sep, path = a.partition("=")
        if sep and path and not Path(a).exists():
            paths.append(Path(path))
            labels.append(label)
        else:
            paths.append(Path(a))
            labels.append(Path(a).name.removesuffix(".json"))
    return paths, labels


def load_value(run: LoadPoint) -> float | None:
    """The x of a load point: its concurrency, or its request rate."""
    v = run.load.concurrency if run.load.concurrency is not None else run.load.rate
    return float(v) if v is not None else None


def _stat(stats: Stats | None, q: str) -> float | None:
    return getattr(stats, q) if stats is not None else None


def table_rows(results: Sequence[Labelled]) -> list[dict[str, Any]]:
    """One row per result and load point: the figures the tables, the CSV and the plots show."""
    rows = []
    for res in results:
        for run in res.result.runs:
            s = run.summary
            icl = s.icl_ms if s.icl_ms is not None else s.itl_ms  # schema-1 results called the chunk gaps itl_ms
            rows.append(
                {
                    "result": res.label,
                    "x": load_value(run),
                    "load": run.label,
                    "requests": s.completed,
                    "errors": s.errors,
                    "req_s": s.request_throughput_rps,
                    "tok_s": s.output_token_throughput_tps,
                    "goodput": s.goodput_rps,
                    "cancelled": s.cancelled,
                    **{f"ttft_p{q}": _stat(s.ttft_ms, f"p{q}") for q in (50, 90, 95, 99)},
                    **{f"tpot_p{q}": _stat(s.tpot_ms, f"p{q}") for q in (50, 90, 95, 99)},
                    "icl_p50": _stat(icl, "p50"),
                    "icl_p99": _stat(icl, "p99"),
                    "tokens": ",".join(s.token_source),
                }
            )
    return rows


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


COLUMNS = (
    "load",
    "ok",
    "err",
    "req/s",
    "tok/s",
    "goodput",
    "TTFT p50",
    "TTFT p90",
    "TTFT p95",
    "TTFT p99",
    "TPOT p50",
    "TPOT p90",
    "TPOT p95",
    "TPOT p99",
    "ICL p50",
    "ICL p99",
    "tokens",
)


def row_cells(r: dict[str, Any]) -> list[str]:
    """One table row as text, in COLUMNS order (latencies in ms); shared by the CLI and the reports."""
    return [
        r["load"],
        str(r["requests"]),
        str(r["errors"]),
        f"{r['req_s']:.2f}",
        f"{r['tok_s']:.1f}",
        f"{r['goodput']:.2f}",
        *(_f(r[f"{m}_p{q}"]) for m in ("ttft", "tpot") for q in (50, 90, 95, 99)),
        _f(r["icl_p50"]),
        _f(r["icl_p99"]),
        r["tokens"],
    ]


STAT_COLUMNS = ("metric", "p50", "p90", "p95", "p99")


def metric_rows(r: dict[str, Any]) -> list[list[str]]:
    """One run as metrics-as-rows (AIPerf's layout: statistics across, metrics down), in STAT_COLUMNS order.

    Fits 80 columns whatever the load's label: the label goes in the table's title, not in a cell."""
    rows = [
        [name, *(_f(r[f"{m}_p{q}"]) for q in (50, 90, 95, 99))]
        for m, name in (("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"))
    ]
    rows.append(["ICL (ms)", _f(r["icl_p50"]), "", "", _f(r["icl_p99"])])
    rows += [
        ["requests ok", str(r["requests"]), "", "", ""],
        ["errors", str(r["errors"]), "", "", ""],
        ["requests/s", f"{r['req_s']:.2f}", "", "", ""],
        ["output tok/s", f"{r['tok_s']:.1f}", "", "", ""],
        ["goodput req/s", f"{r['goodput']:.2f}", "", "", ""],
    ]
    return rows


CSV_FIELDS = (
    "result",
    "load",
    "requests",
    "errors",
    "cancelled",
    "req_s",
    "tok_s",
    "goodput",
    *(f"{m}_p{q}" for m in ("ttft", "tpot") for q in (50, 90, 95, 99)),
    "icl_p50",
    "icl_p99",
    "tokens",
)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """One row per result file and load point, full precision, latencies in ms."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def _floor(results: list[Labelled], floor_ms: float | None) -> dict[str, Any] | None:
    planner = next((d.result.planner for d in results if d.result.planner is not None), None)
    value = floor_ms if floor_ms is not None else (planner.tpot_floor_b1_ms if planner is not None else None)
    if value is None:
        return None
    reference = next((d.result.provenance.reference for d in results if d.result.provenance.reference), None)
    return {
        "ms": value,
        "gpu": (planner.gpu if planner is not None else None) or results[0].result.provenance.gpu,
        # the floor is the GPU's HBM bound; a CPU stand-in says nothing about it
        "meaningful": not reference,
        "reference": reference,
    }


def _notices(results: list[Labelled]) -> list[dict[str, str]]:
    """Interruptions, failed requests and client warnings, per result file."""
    out: list[dict[str, str]] = []
    for res in results:
        lab, doc = res.label, res.result
        if doc.interrupted:
            out.append({"result": lab, "kind": "interrupted", "text": doc.interrupted})
        for run in doc.runs:
            s = run.summary
            kinds = ", ".join(f"{k}: {n}" for k, n in sorted(s.error_kinds.items()))
            if s.requests and not s.completed:
                text = f"{run.label}: all {s.requests} requests failed ({kinds or 'no reason given'})"
                out.append({"result": lab, "kind": "all failed", "text": text})
            elif s.errors:
                first = next((r.error for r in run.records if r.error), None)
                text = f"{run.label}: {s.errors} of {s.requests} requests failed ({kinds})"
                out.append({"result": lab, "kind": "errors", "text": text + (f"; first: {first}" if first else "")})
            if s.cancelled:
                text = f"{run.label}: {s.cancelled} requests in flight were cancelled"
                out.append({"result": lab, "kind": "cancelled", "text": text})
            for w in run.client.warnings or ([run.client.warning] if run.client.warning else []):
                out.append({"result": lab, "kind": "client warning", "text": f"{run.label}: {w}"})
    return out


SLO_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}  # a request meets each at or under the value (metrics.meets)


def provenance_text(value: Any) -> str:
    """A provenance value as a person reads it: a mapping as ``key value`` pairs (unset ones left out), a list
    joined, a fraction rounded; never a Python repr (``{'shared_prefix': None}``)."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {provenance_text(v)}" for k, v in value.items() if v not in (None, "", [], {})) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(provenance_text(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return str(value)


def render(given: Sequence[Labelled | BenchResult], out_dir: Path, *, floor_ms: float | None = None) -> dict[str, Path]:
    """Write report.md, report.html, report.csv and the plots into ``out_dir``; return their paths."""
    jinja2 = require("jinja2", "report")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = labelled(given)
    rows = table_rows(results)
    measured = any(r["requests"] for r in rows)
    slo = next((r.result.runs[0].summary.slo for r in results if r.result.runs), None) or {}
    floor = _floor(results, floor_ms)
    plots = _plots(results, rows, out_dir, slo, floor) if measured else {}
    write_csv(rows, out_dir / "report.csv")
    prov = results[0].result.provenance
    title = f"Benchmark: {prov.model} at {prov.url}"
    if len(results) > 1:
        title = "Benchmark comparison: " + ", ".join(r.label for r in results)
    multi = len(results) > 1
    columns = (["result"] if multi else []) + list(COLUMNS[:-1])
    cells = [([r["result"]] if multi else []) + row_cells(r)[:-1] for r in rows]
    best = min((r["tpot_p50"] for r in rows if r["tpot_p50"] is not None), default=None)
    ctx = {
        "title": title,
        "results": [
            {
                "label": r.label,
                "created": r.result.created,
                "provenance": {k: provenance_text(v) for k, v in _shown(r.result) if v not in (None, "", [], {})},
                "loads": ", ".join(run.label for run in r.result.runs) or "none",
            }
            for r in results
        ],
        "slo": {SLO_NAMES.get(k, k): f"{v:g}" for k, v in slo.items() if v is not None},
        "floor": floor,
        "best_tpot": best,
        "columns": columns,
        "rows": cells,
        "definitions": [{"key": k, "text": v, "aiperf": AIPERF_NAMES.get(k, "")} for k, v in DEFINITIONS.items()],
        "notices": _notices(results),
        "measured": measured,
        "searches": [_search_ctx(r.label, r.result.search) for r in results if r.result.search is not None],
        "plots": [
            {"name": name, "file": p.name, "caption": PLOT_CAPTIONS.get(name, name)} for name, p in plots.items()
        ],
    }
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = lambda x: "-" if x is None else f"{x:.2f}"
    (out_dir / "report.md").write_text(env.get_template("report.md").render(**ctx))
    (out_dir / "report.html").write_text(env.get_template("report.html").render(**ctx))
    return {"markdown": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "report.csv", **plots}


def _shown(result: BenchResult) -> list[tuple[str, Any]]:
    """The provenance a report lists: every field the result holds (unknown ones too), in the document's order."""
    return list(result.provenance.model_dump(mode="json", exclude_unset=True).items())


def _search_ctx(label: str, s: Search) -> dict[str, Any]:
    """An SLO search's summary and probe table for the report templates."""
    rows = [
        [
            str(i),
            p.label,
            p.phase or "",
            _f(p.ttft_ms_p99),
            _f(p.tpot_ms_p99),
            f"{p.goodput_fraction or 0:.1%}",
            f"{p.output_token_throughput_tps or 0:.1f}",
            "met" if p.passed else "missed: " + "; ".join(p.reasons),
        ]
        for i, p in enumerate(s.probes, 1)
    ]
    return {"label": label, "mode": s.mode, "slo": s.slo_text, "message": s.message, "status": s.status, "rows": rows}


PLOT_CAPTIONS = {
    "latency_vs_load": "TTFT, TPOT and inter-chunk latency percentiles against the load, with the SLOs and the "
    "planner's TPOT floor",
    "latency_cdf": "Distribution of TTFT and TPOT per load point",
    "icl": "Inter-chunk latency (gaps between streamed chunks) per load point",
    "throughput_latency": "Output-token throughput against latency across the sweep",
    "slo_search": "SLO search: each probe's P99 TTFT, P99 TPOT and throughput against its load (o met, x missed), "
    "with the SLOs and the knee",
}


def _series(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by result file, each sorted by load: one curve per file, never across files."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["x"] is not None and r["requests"]:
            by.setdefault(r["result"], []).append(r)
    return {k: sorted(v, key=lambda r: r["x"]) for k, v in by.items()}


def _plots(
    results: list[Labelled],
    rows: list[dict[str, Any]],
    out_dir: Path,
    slo: dict[str, Any],
    floor: dict[str, Any] | None,
) -> dict[str, Path]:
    """Draw every plot that has data into ``out_dir``; return their paths by plot name."""
    matplotlib = require("matplotlib", "report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, Path] = {}
    series = _series(rows)
    rate_mode = any(run.load.rate for res in results for run in res.result.runs)
    xlabel = "request rate (req/s)" if rate_mode else "concurrency"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if series:
        out["latency_vs_load"] = out_dir / "latency_vs_load.png"
        _plot_latency_vs_load(plt, series, slo, floor, xlabel, colors, out["latency_vs_load"])
    runs = _labelled_runs(results)
    if _plot_latency_cdf(plt, runs, slo, out_dir / "latency_cdf.png"):
        out["latency_cdf"] = out_dir / "latency_cdf.png"
    gaps = _chunk_gaps(runs)
    if gaps:
        out["icl"] = out_dir / "icl.png"
        _plot_icl(plt, gaps, out["icl"])
    if series:
        out["throughput_latency"] = out_dir / "throughput_latency.png"
        _plot_throughput_latency(plt, series, colors, out["throughput_latency"])
    searches = [(r.label, r.result.search) for r in results if r.result.search is not None and r.result.search.curve]
    if searches:
        out["slo_search"] = out_dir / "slo_search.png"
        _plot_slo_search(plt, searches, colors, out["slo_search"])
    return out


def knee_caption(status: object, load: float, tps: float) -> str:
    """The plot's label for the highest load that met the SLOs: a knee only when the search found one."""
    if status == "found":
        return f"knee {load:g}: {tps:.0f} tok/s"
    if status == "bound":
        return f"no knee within the bounds: SLOs hold at {load:g} ({tps:.0f} tok/s)"
    if status == "probe-limit":
        return f"knee above {load:g} (probe limit): {tps:.0f} tok/s"
    return f"highest load meeting the SLOs {load:g} ({status}): {tps:.0f} tok/s"


def _plot_slo_search(plt: Any, searches: list[tuple[str, Search]], colors: list[str], path: Path) -> None:
    """Each probe's P99 TTFT, P99 TPOT and throughput against its load, met (o) or missed (x), with the SLO
    lines and the knee; drawn from the probes cached in the result, no re-measurement."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for i, (label, s) in enumerate(searches):
        c = colors[i % len(colors)]
        curve = s.curve
        prefix = f"{label} " if len(searches) > 1 else ""
        for ax, key, name in (
            (axes[0], "ttft_ms_p99", "P99 TTFT (ms)"),
            (axes[1], "tpot_ms_p99", "P99 TPOT (ms)"),
            (axes[2], "output_token_throughput_tps", "output tok/s"),
        ):
            pts = [p for p in curve if getattr(p, key) is not None]
            ax.plot([p.load for p in pts], [getattr(p, key) for p in pts], "-", color=c, alpha=0.5)
            for ok, marker, what in ((True, "o", "met"), (False, "x", "missed")):
                sel = [p for p in pts if p.passed is ok]
                if sel:
                    ax.plot(
                        [p.load for p in sel],
                        [getattr(p, key) for p in sel],
                        marker,
                        color=c if ok else "red",
                        linestyle="none",
                        label=f"{prefix}SLOs {what}",
                    )
            knee = s.knee
            if knee is not None:
                ax.axvline(knee.load, color=c, linestyle=":", linewidth=1)
                if key == "output_token_throughput_tps" and knee.output_token_throughput_tps is not None:
                    ax.annotate(
                        knee_caption(s.status, knee.load, knee.output_token_throughput_tps),
                        (knee.load, knee.output_token_throughput_tps),
                        textcoords="offset points",
                        xytext=(4, -12),
                        fontsize=8,
                        color=c,
                    )
            metric = key.split("_p99")[0]
            target = getattr(s.slo, metric) if s.slo is not None and metric in ("ttft_ms", "tpot_ms") else None
            if target is not None:
                _slo_marker(ax, target, _top([getattr(p, key) for p in pts]))
            ax.set_title(name)
            ax.set_xlabel("concurrency" if s.mode == "concurrency" else "request rate (req/s)")
            if s.mode == "concurrency":
                load_axis(ax, sorted({p.load for p in curve}))
            ax.grid(True, alpha=0.3)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("SLO search: " + "; ".join(s.message or "" for _, s in searches)[:160], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _annotate_load(ax: Any, point: dict[str, Any], xy: tuple[Any, Any], color: str) -> None:
    """Label a plotted point with its load value (the part after ``=`` in the load label); a point with a missing
    coordinate (a run that measured TPOT but no TTFT) is not plotted, so it gets no label."""
    if any(v is None for v in xy):
        return
    ax.annotate(
        point["load"].split("=")[-1],
        xy,
        textcoords="offset points",
        xytext=(4, 4),
        fontsize=7,
        color=color,
    )


FAR = 3.0  # an SLO more than this many times the data's top would squeeze the data into the bottom of the axis


def _slo_marker(ax: Any, target: float, top: float | None, *, vertical: bool = False, label: str = "SLO") -> str:
    """Draw the SLO as a line when it is near the data; when it is far above it (a 2,000 ms TTFT SLO over
    10-80 ms of data), keep the axis on the data and write the SLO at the edge instead. Returns which."""
    text = f"{label} {target:g} ms"
    if top is None or top <= 0 or target <= FAR * top:
        line = ax.axvline if vertical else ax.axhline
        line(target, color="red", linestyle="-.", linewidth=1, label=text)
        return "line"
    if vertical:
        ax.set_xlim(right=top * 1.1)
        ax.annotate(
            f"{text} →\n({target / top:.0f}× the data, off the axis)",
            xy=(1.0, 0.5),
            xycoords="axes fraction",
            ha="right",
            fontsize=8,
            color="red",
        )
    else:
        ax.set_ylim(top=top * 1.15)
        ax.annotate(
            f"↑ {text} ({target / top:.0f}× the data, off the axis): met with room to spare",
            xy=(0.02, 0.97),
            xycoords="axes fraction",
            va="top",
            fontsize=8,
            color="red",
        )
    return "annotation"


def _top(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return max(xs) if xs else None


def load_axis(ax: Any, loads: list[float]) -> None:
    """An x axis of load points that stays readable: a log2 scale once they span 8x or more (concurrency doubling
    1, 2, 4 ... 128 would otherwise crowd its low labels into one "1248163264128"), a tick at each point while
    there are at most 12 of them, matplotlib's own ticks beyond that."""
    if loads and loads[0] > 0 and loads[-1] / loads[0] >= 8:
        ax.set_xscale("log", base=2)
    if 0 < len(loads) <= 12:
        ax.set_xticks(loads, [f"{x:g}" for x in loads])
        ax.minorticks_off()


def _plot_latency_vs_load(
    plt: Any,
    series: dict[str, list[dict[str, Any]]],
    slo: dict[str, Any],
    floor: dict[str, Any] | None,
    xlabel: str,
    colors: list[str],
    path: Path,
) -> None:
    """TTFT, TPOT and ICL percentiles against the load, one axis each, with the SLO and planner floor lines."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, metric, name in zip(axes, ("ttft", "tpot", "icl"), ("TTFT", "TPOT", "ICL"), strict=True):
        for i, (label, pts) in enumerate(series.items()):
            c = colors[i % len(colors)]
            xs = [p["x"] for p in pts]
            for q, style in ((50, "o-"), (90, "s--"), (99, "^:")):
                ys = [p.get(f"{metric}_p{q}") for p in pts]
                if all(y is None for y in ys):
                    continue
                ax.plot(xs, ys, style, color=c, label=f"{label} p{q}" if len(series) > 1 else f"p{q}")
            for p in pts:
                y = p.get(f"{metric}_p50")
                if y is not None:
                    _annotate_load(ax, p, (p["x"], y), c)
        target = slo.get(f"{metric}_ms")
        if target is not None:
            top = _top([p.get(f"{metric}_p{q}") for pts in series.values() for p in pts for q in (50, 90, 99)])
            _slo_marker(ax, target, top)
        if metric == "tpot" and floor is not None and floor["meaningful"]:
            ax.axhline(
                floor["ms"], color="gray", linestyle="--", linewidth=1, label=f"planner floor {fmt_ms(floor['ms'])}"
            )
        ax.set_title(f"{name} (ms)")
        load_axis(ax, sorted({p["x"] for pts in series.values() for p in pts}))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _labelled_runs(results: list[Labelled]) -> list[tuple[str, LoadPoint]]:
    """Every load point of every result file, labelled ``file: load`` when several files are compared."""
    return [
        (f"{res.label}: {run.label}" if len(results) > 1 else run.label, run)
        for res in results
        for run in res.result.runs
    ]


def _plot_latency_cdf(plt: Any, runs: list[tuple[str, LoadPoint]], slo: dict[str, Any], path: Path) -> bool:
    """TTFT and TPOT CDFs per load point; saved to ``path`` only when a curve was drawn (returned)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    drawn = False
    for ax, metric, name in zip(axes, ("ttft_ms", "tpot_ms"), ("TTFT", "TPOT"), strict=True):
        top: float | None = None
        for label, run in runs:
            vals = sorted(v for r in run.records if (v := getattr(r, metric)) is not None and not r.warmup)
            if vals:
                ax.plot(vals, [(i + 1) / len(vals) for i in range(len(vals))], label=label)
                drawn = True
                top = max(top or 0.0, vals[-1])
        target = slo.get(metric)
        if target is not None:
            _slo_marker(ax, target, top, vertical=True)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{name} CDF")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def _chunk_gaps(runs: list[tuple[str, LoadPoint]]) -> list[tuple[str, list[float]]]:
    """Gaps between streamed chunks (ms) of the measured, successful requests, per load point that has any."""
    gaps = []
    for label, run in runs:
        g = [
            (b - a) * 1000
            for r in run.records
            if not r.warmup and not r.error
            for a, b in itertools.pairwise(r.chunk_times)
        ]
        if g:
            gaps.append((label, g))
    return gaps


def _plot_icl(plt: Any, gaps: list[tuple[str, list[float]]], path: Path) -> None:
    """Box plot of the inter-chunk latency per load point."""
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(gaps) + 3), 4.5))
    ax.boxplot([g for _, g in gaps], showfliers=True)
    ax.set_xticks(range(1, len(gaps) + 1), [lab for lab, _ in gaps], rotation=20, fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title("inter-chunk latency per load point (box: p25-p75, whiskers 1.5 IQR)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_throughput_latency(plt: Any, series: dict[str, list[dict[str, Any]]], colors: list[str], path: Path) -> None:
    """TTFT p99 and TPOT p50 against output-token throughput, one curve per result file."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, pts) in enumerate(series.items()):
        c = colors[i % len(colors)]
        pts = [p for p in pts if p["tpot_p50"] is not None]
        prefix = f"{label} " if len(series) > 1 else ""
        ax.plot([p["tok_s"] for p in pts], [p["ttft_p99"] for p in pts], "o-", color=c, label=f"{prefix}TTFT p99")
        ax.plot([p["tok_s"] for p in pts], [p["tpot_p50"] for p in pts], "s--", color=c, label=f"{prefix}TPOT p50")
        for p in pts:
            _annotate_load(ax, p, (p["tok_s"], p["ttft_p99"]), c)
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("throughput vs latency across the sweep")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
