"""`toolchain diagnose`: the diagnosis rules (docs/diagnose.md) over a bench result and/or live metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import JsonOpt, MetricsUrlOpt, ServedModelOpt


def diagnose(
    metrics_url: MetricsUrlOpt = None,
    bench: Annotated[Path | None, typer.Option("--bench", help="A result JSON from `toolchain bench --save`")] = None,
    model: ServedModelOpt = "tensorrt_llm",
    samples: Annotated[int, typer.Option("--samples", min=1, max=3600, help="Metric samples, 1 s apart")] = 3,
    prefix_caching: Annotated[
        bool | None,
        typer.Option("--prefix-caching/--no-prefix-caching", help="Whether prefix caching is configured"),
    ] = None,
    rules: Annotated[
        bool, typer.Option("--rules", help="Print the rule table (the same rows the deployment's alerts use)")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Findings with evidence, severity and the action to take; exit 0 even when findings exist.

    Examples: toolchain diagnose --metrics-url http://127.0.0.1:8002/metrics --bench run.json;
    toolchain diagnose --rules
    """
    from toolchain.cli.render import err, out, print_json
    from toolchain.pipeline.diagnose import diagnose_deployment

    if rules:
        if metrics_url or bench:
            from toolchain.errors import UserInputError

            raise UserInputError(
                "--rules prints the rule table and reads no metrics",
                "drop --metrics-url/--bench, or run without --rules",
            )
        _print_rules(json_out)
        return

    d = diagnose_deployment(
        metrics_url=metrics_url, bench=bench, model=model, samples=samples, prefix_caching=prefix_caching
    )
    for note in d.notes:
        err.print(note, highlight=False, markup=False)
    if json_out:
        print_json({"findings": [f.to_json() for f in d.findings], "server": d.server})
        return
    if not d.findings:
        err.print("no findings: nothing in these metrics matches a rule")
    for f in d.findings:
        out.print(f"[{f.severity}] {f.rule}: {f.evidence}\n    action: {f.action}", markup=False, highlight=False)
    from toolchain.diagnose.summary import server_lines, slo_line

    if d.server:  # the figures the rules read, with units and rounded (--json keeps the raw fields)
        for line in server_lines(d.server):
            err.print(line, highlight=False, markup=False)
    slos = slo_line(d.slo)
    if slos:
        err.print(slos, highlight=False, markup=False)


def _print_rules(json_out: bool) -> None:
    """The rule table, in the cookbook's order: what fires, why, what to do, and the alert that pages for it."""
    from toolchain.artifacts.rule_table import RULES, table_json
    from toolchain.cli.render import out, print_json

    if json_out:
        print_json(table_json())
        return
    for i, r in enumerate(RULES, 1):
        sev = r.severity + (f" (critical above {r.critical_above:g})" if r.critical_above is not None else "")
        alert = f"alert {r.alert}: {r.expr} for {r.for_}" if r.expr else f"no alert: {r.needs}"
        out.print(
            f"{i}. [{r.step}] {r.name} ({sev})\n    fires when: {r.fires_when}\n    why: {r.why}\n"
            f"    action: {r.action}\n    {alert}",
            markup=False,
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    app.command()(diagnose)
