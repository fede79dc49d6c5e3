"""Render bench results as Markdown + HTML with PNG plots (throughput vs latency, latency CDFs)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from toolchain.bench.metrics import DEFINITIONS
from toolchain.errors import UserInputError


def load_results(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        hint = "pass files written by `toolchain bench --out`"
        try:
            d = json.loads(p.read_bytes())
        except OSError as e:
            raise UserInputError(f"cannot read bench result {p}: {e.strerror or e}", hint) from None
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or absurdly nested
            raise UserInputError(f"{p} is not JSON, so not a toolchain bench result", hint) from None
        if not isinstance(d, dict) or d.get("kind") != "toolchain.bench-result":
            raise UserInputError(f"{p} is not a toolchain bench result", hint)
        problem = _result_problem(d)
        if problem is not None:
            raise UserInputError(f"{p} is a damaged toolchain bench result: {problem}", hint)
        out.append(d)
    return out


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _result_problem(d: dict[str, Any]) -> str | None:
    """What makes a bench result unusable by the reports and diagnose (None when it is whole)."""
    if not isinstance(d.get("provenance", {}), dict):
        return "provenance is not an object"
    runs = d.get("runs")
    if not isinstance(runs, list) or not runs:
        return "runs is not a non-empty list"
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or not isinstance(run.get("label"), str):
            return f"runs[{i}] has no label"
        s = run.get("summary")
        if not isinstance(s, dict):
            return f"runs[{i}].summary is missing"
        for k in ("completed", "errors", "request_throughput_rps", "output_token_throughput_tps", "goodput_rps"):
            if not _number(s.get(k)):
                return f"runs[{i}].summary.{k} is not a number"
        ts = s.get("token_source")
        if not isinstance(ts, list) or not all(isinstance(t, str) for t in ts):
            return f"runs[{i}].summary.token_source is not a list of names"
        for metric in ("ttft_ms", "tpot_ms", "itl_ms"):
            m = s.get(metric)
            if m is not None and (not isinstance(m, dict) or not all(v is None or _number(v) for v in m.values())):
                return f"runs[{i}].summary.{metric} is not a table of numbers"
        srv = run.get("server")
        if srv is not None and (
            not isinstance(srv, dict) or any(k != "model" and v is not None and not _number(v) for k, v in srv.items())
        ):
            return f"runs[{i}].server is not a table of numbers"
        records = run.get("records", [])
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            return f"runs[{i}].records is not a list of objects"
        for r in records:
            if any(r.get(k) is not None and not _number(r.get(k)) for k in ("ttft_ms", "tpot_ms")):
                return f"runs[{i}].records holds a latency that is not a number"
    return None


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for res in results:
        for run in res["runs"]:
            s = run["summary"]

            def p(metric: str, q: str, s: dict[str, Any] = s) -> float | None:
                return (s.get(metric) or {}).get(q)

            rows.append(
                {
                    "load": run["label"],
                    "requests": s["completed"],
                    "errors": s["errors"],
                    "req_s": s["request_throughput_rps"],
                    "tok_s": s["output_token_throughput_tps"],
                    "goodput": s["goodput_rps"],
                    "ttft_p50": p("ttft_ms", "p50"),
                    "ttft_p99": p("ttft_ms", "p99"),
                    "tpot_p50": p("tpot_ms", "p50"),
                    "tpot_p99": p("tpot_ms", "p99"),
                    "itl_p50": p("itl_ms", "p50"),
                    "itl_p99": p("itl_ms", "p99"),
                    "tokens": ",".join(s["token_source"]),
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
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "ITL p50",
    "ITL p99",
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
        _f(r["ttft_p50"]),
        _f(r["ttft_p99"]),
        _f(r["tpot_p50"]),
        _f(r["tpot_p99"]),
        _f(r["itl_p50"]),
        _f(r["itl_p99"]),
        r["tokens"],
    ]


def render(results: list[dict[str, Any]], out_dir: Path, *, floor_ms: float | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = table_rows(results)
    plots = _plots(results, rows, out_dir)
    prov = results[0]["provenance"]
    md = [f"# Benchmark: {prov.get('model')} at {prov.get('url')}", ""]
    for k in ("engine_key", "profile_id", "spec", "cell", "gpu", "reference"):
        if prov.get(k) is not None:
            md.append(f"- {k}: `{prov[k]}`")
    md += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    if floor_ms is not None:
        best = min((r["tpot_p50"] for r in rows if r["tpot_p50"] is not None), default=None)
        md += [
            "",
            f"Planner TPOT floor for this cell: {floor_ms:.2f} ms; best measured TPOT p50: {_f(best)} ms"
            + (f" ({best / floor_ms:.1f}x the floor)" if best else ""),
        ]
    md += ["", "Definitions (ms):"] + [f"- {k}: {v}" for k, v in DEFINITIONS.items()]
    md += [""] + [f"![{name}]({p.name})" for name, p in plots.items()]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    body = "".join(f"<p>{html.escape(line)}</p>" if not line.startswith("|") else "" for line in md[:8])
    head = "".join(f"<th>{html.escape(h)}</th>" for h in COLUMNS)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells(r)) + "</tr>" for r in rows)
    imgs = "".join(f'<img src="{p.name}" alt="{html.escape(n)}" width="520">' for n, p in plots.items())
    (out_dir / "report.html").write_text(
        f"<html><body>{body}<table border=1><tr>{head}</tr>{trs}</table>{imgs}</body></html>"
    )
    return {"markdown": out_dir / "report.md", "html": out_dir / "report.html", **plots}


def _plots(results: list[dict[str, Any]], rows: list[dict[str, Any]], out_dir: Path) -> dict[str, Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out: dict[str, Path] = {}
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for metric, a in (("ttft_ms", ax[0]), ("tpot_ms", ax[1])):
        for res in results:
            for run in res["runs"]:
                vals = sorted(r[metric] for r in run["records"] if r.get(metric) is not None and not r.get("warmup"))
                if vals:
                    a.plot(vals, [(i + 1) / len(vals) for i in range(len(vals))], label=run["label"])
        a.set_xlabel(f"{metric.split('_')[0].upper()} (ms)")
        a.set_ylabel("fraction of requests")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle("latency CDFs")
    fig.tight_layout()
    out["latency_cdf"] = out_dir / "latency_cdf.png"
    fig.savefig(out["latency_cdf"], dpi=90)
    plt.close(fig)
    pts = [r for r in rows if r["tpot_p50"] is not None]
    if pts:
        fig, ax1 = plt.subplots(figsize=(6, 4))
        ax1.plot([r["tok_s"] for r in pts], [r["ttft_p99"] for r in pts], "o-", label="TTFT p99")
        ax1.plot([r["tok_s"] for r in pts], [r["tpot_p50"] for r in pts], "s-", label="TPOT p50")
        ax1.set_xlabel("output tokens/s")
        ax1.set_ylabel("ms")
        ax1.grid(True, alpha=0.3)
        ax1.legend()
        ax1.set_title("throughput vs latency across the sweep")
        fig.tight_layout()
        out["throughput_latency"] = out_dir / "throughput_latency.png"
        fig.savefig(out["throughput_latency"], dpi=90)
        plt.close(fig)
    return out
