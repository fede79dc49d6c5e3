"""`toolchain diagnose`: the P99-TTFT cookbook's rules over live metrics and/or a bench result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import JsonOpt


def register(app: typer.Typer) -> None:
    @app.command()
    def diagnose(
        metrics_url: Annotated[str | None, typer.Option("--metrics-url", help="Prometheus URL to sample")] = None,
        bench: Annotated[
            Path | None, typer.Option("--bench", help="A result JSON from `toolchain bench --out`")
        ] = None,
        model: Annotated[str, typer.Option("--model", help="The LLM model name in the metrics")] = "tensorrt_llm",
        samples: Annotated[int, typer.Option("--samples", min=1, max=3600, help="Metric samples, 1 s apart")] = 3,
        prefix_caching: Annotated[
            bool | None,
            typer.Option("--prefix-caching/--no-prefix-caching", help="Whether prefix caching is configured"),
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Findings with evidence, severity and the action to take; exit 0 even when findings exist.

        Examples: toolchain diagnose --metrics-url http://127.0.0.1:8002/metrics --bench run.json
        """
        import json
        import time

        from toolchain.bench import prom
        from toolchain.bench.report import load_results
        from toolchain.cli.render import err, out, print_json
        from toolchain.diagnose.rules import bench_window, observations_from
        from toolchain.diagnose.rules import diagnose as run_rules
        from toolchain.errors import UserInputError

        if not metrics_url and not bench:
            raise UserInputError("give --metrics-url, --bench, or both")
        result = load_results([bench])[0] if bench else None
        server = bench_window(result)
        if server is not None and metrics_url:
            err.print(
                f"using the server metrics {bench} recorded during its run; {metrics_url} is not sampled now",
                highlight=False,
                markup=False,
            )
        elif metrics_url:
            if result is not None:
                err.print(
                    f"{bench} holds no server metrics (bench ran without --metrics-url): sampling the server now, "
                    "which may be idle",
                    highlight=False,
                    markup=False,
                )
            snaps = []
            for i in range(max(1, samples)):
                snaps.append(prom.scrape(metrics_url))
                if i + 1 < samples:
                    time.sleep(1)
            server = prom.server_side(snaps[0], snaps[-1], snaps, model)
        if prefix_caching is None and result is not None:
            prefix_caching = True if any(r.get("prefix") for r in result["runs"]) else None
        findings = run_rules(observations_from(result, server, prefix_caching))
        if json_out:
            print_json({"findings": [f.to_json() for f in findings], "server": server})
            return
        if not findings:
            err.print("no findings: nothing in these metrics matches a cookbook rule")
        for f in findings:
            out.print(f"[{f.severity}] {f.rule}: {f.evidence}\n    action: {f.action}", markup=False, highlight=False)
        if server:
            err.print(
                "server: " + json.dumps({k: v for k, v in server.items() if v is not None}),
                highlight=False,
                markup=False,
            )
