"""`toolchain bench` (load test a deployment) and `toolchain bench report` (Markdown/HTML + plots)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolchain.bench.options import BenchOptions
from toolchain.cli.model_options import model_options, values, with_parameters
from toolchain.cli.options import ForceOpt, JsonOpt, out_dir_opt

SaveOpt = Annotated[Path | None, typer.Option("--save", help="Write the result JSON to this file")]

if TYPE_CHECKING:
    from toolchain.artifacts.bench_result import BenchResult, Search

app = typer.Typer(
    help="Benchmark a deployment: TTFT, TPOT, inter-chunk latency, throughput, goodput, prefix-cache proof.",
    invoke_without_command=True,
    # built on its own when named (main.LAZY), not through the top-level app: the same plain help, no completion
    rich_markup_mode=None,
    add_completion=False,
)


def bench(ctx: typer.Context, **given: Any) -> None:
    """Run a load test; print a table and write one JSON document with raw timings and provenance.

    Examples:
      toolchain bench --url 127.0.0.1:8001 --repo ./repo --concurrency 1,4 --requests 32 --save run.json
      toolchain bench --url http://127.0.0.1:8000 --protocol openai --model llama --rate 2,4 --poisson --tokenizer ./tok
      toolchain bench --url 127.0.0.1:8001 --repo ./repo --spec spec.yaml --slo-search concurrency --save knee.json
      toolchain bench --url http://127.0.0.1:8000 --protocol openai --tokenizer ./tok --trace trace.jsonl --workers 4
    """
    if ctx.invoked_subcommand is not None:
        return
    from toolchain.bench.run import without_records
    from toolchain.cli.render import Stages, err, print_json
    from toolchain.pipeline.bench import assess, run_benchmark

    save: Path | None = given["save"]
    json_out: bool = given["json_out"]
    opts = BenchOptions(**values(BenchOptions, given))
    result = run_benchmark(opts, save_to=save, progress=Stages(quiet=json_out))
    if json_out:
        print_json(without_records(result))
    else:
        print_table(result)
        if save:
            err.print(f"result: {save}", highlight=False)
    code, reason = assess(result)
    if code:
        kept = f"the partial results are in {save}" if save else "pass --save FILE to keep partial results"
        from toolchain import redact

        sys.stderr.write(redact.text(f"Error: the benchmark did not measure what was asked: {reason} — {kept}") + "\n")
        raise typer.Exit(code)


# The command's options: the fields of BenchOptions (each flag declared there once), then what to do with the
# result. Built here, when the CLI starts.
app.callback()(
    with_parameters(
        bench,
        [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
            *model_options(BenchOptions),
            inspect.Parameter("save", inspect.Parameter.KEYWORD_ONLY, annotation=SaveOpt, default=None),
            inspect.Parameter("json_out", inspect.Parameter.KEYWORD_ONLY, annotation=JsonOpt, default=False),
        ],
    )
)


def print_table(res: BenchResult, *, served_by: bool = True) -> None:
    """One table per load, metrics as rows (readable at 80 columns), then the run's notes on stderr.
    ``served_by``: say what served a stand-in's figures (a caller that says it itself passes False)."""
    from rich.table import Table

    from toolchain.bench.report import STAT_COLUMNS, Labelled, _f, metric_rows, table_rows
    from toolchain.cli.render import Stages, err, fmt_ms, out

    Stages.settle_all()  # the measurement ended: no bar redraws into the table
    where = f"{res.provenance.model} @ {res.provenance.url}"
    if res.provenance.reference and served_by:
        err.print(f"served by the {res.provenance.reference}", highlight=False, markup=False)
    for r in table_rows([Labelled("", res)]):
        t = Table(
            title=f"bench {where}: {r['load']}", caption=f"tokens counted by {r['tokens']}" if r["tokens"] else None
        )
        for i, c in enumerate(STAT_COLUMNS):
            t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
        for cells in metric_rows(r):
            t.add_row(*cells)
        out.print(t)
    for run in res.runs:
        for w in run.client.warnings:
            err.print(f"warning ({run.label}): {w}", highlight=False, markup=False)
        if run.summary.cancelled:
            err.print(f"{run.label}: {run.summary.cancelled} request(s) in flight were cancelled", highlight=False)
        if run.prefix:
            p = run.prefix
            err.print(
                f"prefix cache ({run.label}): shared-prefix TTFT p50 {_f(p.shared_ttft_ms_p50)} ms, "
                f"reused blocks {p.shared_reused_blocks_mean}; unique TTFT p50 {_f(p.unique_ttft_ms_p50)} "
                f"ms, reused {p.unique_reused_blocks_mean}",
                highlight=False,
                markup=False,
            )
        if run.speculative:
            sp = run.speculative
            per_step = f"{sp.tokens_per_step:.2f}" if sp.tokens_per_step else "-"
            err.print(
                f"speculative ({run.label}): acceptance {sp.acceptance_rate:.1%} "
                f"({sp.accepted_draft_tokens}/{sp.draft_tokens} draft tokens), {per_step} tokens per step",
                highlight=False,
                markup=False,
            )
    if res.planner:
        floor = f"planner TPOT floor on {res.planner.gpu}: {fmt_ms(res.planner.tpot_floor_b1_ms)}"
        if res.provenance.reference:  # the tables above are a stand-in's, on this machine: not comparable
            floor += " (that GPU's roofline, not what measured above)"
        err.print(floor, highlight=False, markup=False)
    if res.search:
        print_search(res.search)


def print_search(search: Search) -> None:
    """The SLO search's probes in the order measured, and how it ended. Fits 80 columns: the load column is
    named after the search (its values are numbers), figures never wrap, the verdict wraps at spaces."""
    from rich.table import Table

    from toolchain.bench.report import _f
    from toolchain.cli.render import err, out

    unit = "concurrency" if search.mode == "concurrency" else "req/s"
    t = Table(title=f"SLO search ({search.mode}): {search.slo_text}")
    for c in ("#", unit, "phase", "P99 TTFT", "P99 TPOT", "goodput", "tok/s", "SLOs"):
        t.add_column(c, no_wrap=True, justify="left" if c in ("#", "phase", "SLOs") else "right")
    missed: list[str] = []
    for i, p in enumerate(search.probes, 1):
        verdict = "met" if p.passed else "missed"
        if not p.passed and p.reasons:
            missed.append(f"probe {i} ({p.label}) missed: {'; '.join(p.reasons)}")
        t.add_row(
            str(i),
            f"{p.load:g}",
            p.phase or "",
            _f(p.ttft_ms_p99),
            _f(p.tpot_ms_p99),
            f"{p.goodput_fraction or 0:.0%}",
            f"{p.output_token_throughput_tps or 0:.0f}",
            verdict,
        )
    out.print(t)
    for line in missed:  # the reasons in full, below the table: a cell would wrap them word by word
        err.print(line, highlight=False, markup=False)
    err.print(f"SLO search: {search.message}", highlight=False, markup=False)


@app.command(short_help="Print the JSON Schema of `toolchain bench --save` results.")
def schema() -> None:
    """Print the JSON Schema of the result file `toolchain bench --save` writes (docs/bench-result.md).

    Examples:
      toolchain bench schema > bench-result.schema.json
      check-jsonschema --schemafile bench-result.schema.json run.json
    """
    from toolchain.artifacts.bench_result import json_schema
    from toolchain.cli.render import print_json

    print_json(json_schema())


@app.command(short_help="Render HTML and Markdown reports, a CSV and plots.")
def report(
    results: Annotated[
        list[str], typer.Argument(help="Result JSON files from `toolchain bench --save`, each PATH or LABEL=PATH")
    ],
    out: Annotated[Path, out_dir_opt("report.html, report.md, report.csv and plots")],
    force: ForceOpt = False,
) -> None:
    """Render HTML and Markdown reports, a CSV and plots; several results are compared side by side.

    Examples:
      toolchain bench report run.json --out ./report
      toolchain bench report fp8=run-fp8.json int4=run-int4.json --out ./compare
    """
    from toolchain.bench.report import load_results, parse_labelled, render
    from toolchain.cli.render import out as out_console
    from toolchain.outdir import write_output

    paths, labels = parse_labelled(results)
    loaded = load_results(paths, labels)
    files = write_output(out, lambda d: render(loaded, d), command="bench report", force=force)
    for name, p in files.items():
        out_console.print(f"{name}: {p}", highlight=False, markup=False)


@app.command("stand-in", short_help="Serve a slot-limited stand-in LLM server (no model).")
def stand_in(
    slots: Annotated[int, typer.Option("--slots", help="Decode slots: requests beyond them wait for one")] = 4,
    first_token_ms: Annotated[
        float, typer.Option("--first-token-ms", help="Time from taking a slot to the first token")
    ] = 20.0,
    token_ms: Annotated[float, typer.Option("--token-ms", help="Time per token after the first")] = 50.0,
    host: Annotated[str, typer.Option("--host", help="Bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port (0 picks a free one)")] = 8000,
    tokenizer_out: Annotated[
        Path | None, typer.Option("--tokenizer-out", help="Write the stand-in's tokenizer here, for bench --tokenizer")
    ] = None,
) -> None:
    """Serve a slot-limited stand-in for an LLM server (OpenAI API, no model) until Ctrl-C: the capacity example.

    Each request holds one of --slots decode slots for --first-token-ms + (max_tokens - 1) x --token-ms; a
    request that finds every slot busy waits for one, so a knee search finds --slots exactly (docs/capacity.md).

    Examples:
      toolchain bench stand-in --slots 3 --port 37021 --tokenizer-out ./standin-tok
      toolchain bench stand-in --slots 8 --token-ms 10 --port 0
    """
    import signal
    import threading

    from toolchain.bench.standin import StandInOptions, serve
    from toolchain.cli.render import err

    opts = StandInOptions(slots=slots, first_token_ms=first_token_ms, token_ms=token_ms, host=host, port=port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())

    def say(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    serve(opts, stop=stop, say=say, tokenizer_out=tokenizer_out)
