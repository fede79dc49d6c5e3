"""`toolchain dynamo plan|deploy|up`: disaggregated prefill/decode on NVIDIA Dynamo."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolchain.cli.options import (
    CellOpt,
    DynamoRegistryOpt,
    EngineDigestOpt,
    Estimator,
    EstimatorOpt,
    ForceOpt,
    JsonOpt,
    SpecArg,
    out_dir_opt,
)

if TYPE_CHECKING:
    from toolchain.dynamo.plan import DynamoPlan

app = typer.Typer(
    help="NVIDIA Dynamo: plan prefill/decode pools, write a DynamoGraphDeployment, run the topology here with the "
    "Dynamo mocker (stand-in for dynamo.trtllm).",
    no_args_is_help=True,
)


class Mode(str, Enum):
    """``toolchain.specs.dynamo.DynamoServing.mode``."""

    aggregated = "aggregated"
    disaggregated = "disaggregated"


ModeOpt = Annotated[Mode | None, typer.Option("--mode", help="Override the spec's dynamo.mode")]


@app.command("plan", short_help="Size prefill and decode pools; say if disaggregation pays.")
def plan(
    spec: SpecArg,
    cell: CellOpt = None,
    mode: ModeOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="Print the formulas with the numbers")] = False,
    estimator: EstimatorOpt = Estimator.auto,
    json_out: JsonOpt = False,
) -> None:
    """Size the prefill and decode pools from the SLOs and traffic, beside the aggregated fleet; say whether
    disaggregation pays. Pools are timed by NVIDIA AIConfigurator's measured database where it is installed
    (prefill-only, decode-only and in-flight-batching estimates), with the roofline floor's GPU count beside it.

    Examples: toolchain dynamo plan engine_specs/llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml --explain
    """
    from rich import box
    from rich.table import Table

    from toolchain.cli.render import err, out, print_json
    from toolchain.dynamo.pipeline import plan_spec
    from toolchain.dynamo.plan import explain as explain_plan

    planned = plan_spec(spec, cell, mode=mode.value if mode else None, estimator=estimator.value, progress=_narrate)
    p = planned.plan
    if json_out:
        print_json(p.to_json())
        return
    t = Table(
        title=f"dynamo plan: {planned.cell.spec.name}\ncell {p.cell_id}, {p.mode}",
        box=box.SIMPLE_HEAVY,  # no vertical rules: eight columns fit 80 (a boxed table cut every header)
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        show_edge=False,
    )
    cols = ["pool", "GPU", "workers", "GPUs", "batch", "step ms", "prefill ms", "req/s/w"]
    for i, col in enumerate(cols):
        t.add_column(col, justify="left" if i < 2 else "right", no_wrap=True)
    rows = [*p.pools, *([p.aggregated] if p.mode == "disaggregated" else [])]
    for pp in rows:
        name = "aggregated*" if pp is p.aggregated and p.mode == "disaggregated" else pp.role
        t.add_row(
            name,
            pp.gpu,
            f"{pp.replicas} × TP{pp.tp}" if pp.replicas else f"none† TP{pp.tp}",
            str(pp.gpus),
            str(pp.batch) if pp.batch else "-",
            f"{pp.step_ms:.2f}" if pp.step_ms else "-",
            f"{pp.prefill_ms:.1f}",
            f"{pp.rps_per_worker:.2f}",
        )
    out.print(t)
    if p.mode == "disaggregated":
        out.print("* the aggregated fleet at the same SLOs, for comparison", markup=False, highlight=False)
    if any(not pp.replicas for pp in rows):
        out.print("† no worker count meets the TPOT SLO", markup=False, highlight=False)
    if explain:  # the arithmetic, with the summary's figures, the verdict and the notes: each said once
        out.print(explain_plan(p, planned.arch), markup=False, highlight=False)
        return
    out.print(
        f"KV per request {p.kv_bytes_per_request / 1e9:.2f} GB; transfer {p.transfer_ms:.2f} ms over {p.link} "
        f"({p.link_gb_s:g} GB/s per GPU); TTFT ≈ {p.ttft_ms:.1f} ms, TPOT P99 ≈ {p.tpot_p99_ms:.2f} ms "
        f"(aggregated {p.aggregated_tpot_p99_ms:.2f} ms)",
        markup=False,
        highlight=False,
    )
    out.print(p.verdict, markup=False, highlight=False)
    out.print(timed_line(p), markup=False, highlight=False)
    for n in dict.fromkeys(p.notes):
        err.print(f"note: {n}", markup=False, highlight=False)


def timed_line(p: DynamoPlan) -> str:
    """What timed the pools, with the floor's GPU count beside a silicon plan."""
    if p.estimator == "floor":
        return "timed by the roofline floor (a lower bound: `--estimator auto` with AIConfigurator installed)"
    floor = f"; the roofline floor needs {p.floor_gpus} GPUs (a lower bound)" if p.floor_gpus is not None else ""
    return f"timed by {p.estimator}: {p.total_gpus} GPUs{floor}"


def _narrate(stage: str, *_a: object, **_k: object) -> None:
    """Narration on a terminal only (the silicon database of each GPU takes seconds to load)."""
    from toolchain.cli.render import err

    if err.is_terminal:
        err.print(f"dynamo plan: {stage}", markup=False, highlight=False)


@app.command("deploy", short_help="Write a DynamoGraphDeployment sized from the plan.")
def deploy(
    spec: SpecArg,
    out: Annotated[
        Path, out_dir_opt("the DynamoGraphDeployment, its NetworkPolicy, the engine-args files and a kustomization")
    ],
    cell: CellOpt = None,
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes namespace")] = "default",
    model_path: Annotated[
        str | None, typer.Option("--model-path", help="Checkpoint path or HF id in the pod (default: the spec's)")
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine", help="Registry key, tag or digest of the LLM-API artifact the workers pull and verify"
        ),
    ] = None,
    registry: DynamoRegistryOpt = None,
    registry_secret: Annotated[
        str | None, typer.Option("--registry-secret", help="Secret with the registry credentials (envFrom)")
    ] = None,
    toolchain_image: Annotated[
        str | None, typer.Option("--toolchain-image", help="Image with the toolchain, for the pull init container")
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="The pull step requires the artifact signed by this key (cosign.pub, PEM; docs/signing.md)",
        ),
    ] = None,
    engine_digest: EngineDigestOpt = None,
    estimator: EstimatorOpt = Estimator.auto,
    allow_unquantized: Annotated[
        bool,
        typer.Option(
            "--allow-unquantized",
            help="Serve the spec's Hub model unquantized when its quantized bundle is not given (--engine)",
        ),
    ] = False,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a DynamoGraphDeployment (nvidia.com/v1beta1): frontend, prefill and decode workers running
    dynamo.trtllm, sized from the plan. A spec with quantized weights needs its quantized bundle (--engine) or
    a quantized checkpoint (--model-path); --allow-unquantized serves the Hub model as published instead.

    Examples:
      toolchain dynamo deploy SPEC --out ./dgd --engine llama70b-fp8 --registry s3://models/llm --toolchain-image IMG
      toolchain dynamo deploy engine_specs/llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml --out ./dgd --allow-unquantized
    """
    from toolchain.cli.render import err, print_json
    from toolchain.cli.render import out as out_console
    from toolchain.dynamo.pipeline import deploy as deploy_dgd

    res = deploy_dgd(
        spec,
        out,
        cell_id=cell,
        namespace=namespace,
        model_path=model_path,
        engine=engine,
        registry=registry,
        registry_secret=registry_secret,
        toolchain_image=toolchain_image,
        public_key=public_key,
        engine_digest=engine_digest,
        estimator=estimator.value,
        progress=_narrate,
        force=force,
        allow_unquantized=allow_unquantized,
    )
    for w in res.warnings:  # written as asked, but not what the plan sized the pools for
        err.print(f"warning: {w}", markup=False, highlight=False)
    if json_out:
        print_json(res.to_json())
        return
    files = res.files
    for name, path in files.items():
        out_console.print(f"{name}: {path}", markup=False, highlight=False)
    err.print(f"apply with: kubectl apply -k {out}", markup=False, highlight=False, soft_wrap=True)


@app.command("up", short_help="Run the spec's topology here with the Dynamo mocker.")
def up(
    spec: SpecArg,
    cell: CellOpt = None,
    mode: ModeOpt = None,
    http_port: Annotated[int | None, typer.Option("--http-port", min=1, max=65535, help="Frontend port")] = None,
    speedup: Annotated[
        float | None,
        typer.Option("--speedup", help="Divide the planner's timings by this (default: a decode step takes ~4 ms)"),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            help="Run directory: logs, discovery, model card [default: a new one under $TOOLCHAIN_CACHE/dynamo/]",
        ),
    ] = None,
    ready_timeout: Annotated[float, typer.Option("--ready-timeout", min=1, max=3600)] = 120,
    estimator: EstimatorOpt = Estimator.auto,
    json_out: JsonOpt = False,
) -> None:
    """Run the spec's topology here: Dynamo frontend and router, and the Dynamo mocker (stand-in for dynamo.trtllm)
    as prefill/decode workers timed by the planner; every listener on 127.0.0.1; until Ctrl-C.

    Examples: toolchain dynamo up engine_specs/llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml --http-port 18000
    """
    import contextlib
    import json
    import signal
    import sys
    import threading

    from toolchain.artifacts import standins
    from toolchain.cli.render import Stages, err
    from toolchain.dynamo.local import STAND_IN, LocalDeployment, serve_until
    from toolchain.dynamo.pipeline import up as up_pipeline

    stop = threading.Event()
    stages = Stages(quiet=json_out)
    _planned, started = up_pipeline(
        spec,
        cell_id=cell,
        mode=mode.value if mode else None,
        workdir=workdir,
        http_port=http_port,
        speedup=speedup,
        ready_timeout=ready_timeout,
        estimator=estimator.value,
        progress=stages,
    )
    stages.settle()  # the model is registered: nothing redraws after the ready line
    assert isinstance(started, LocalDeployment)
    dep = started
    recorded = contextlib.ExitStack()  # while it serves, a bench of its address names the mocker (artifacts.standins)
    try:
        recorded.enter_context(standins.serving(dep.url, STAND_IN))
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        info = dep.describe()
        if json_out:
            sys.stdout.write(json.dumps({"ready": True, **info}) + "\n")
            sys.stdout.flush()
        else:
            err.print(f"serving {STAND_IN}, not TensorRT-LLM: timings are the planner's ÷ {dep.speedup:g}")
            err.print(
                f"ready: OpenAI {dep.url} (model {dep.model})  metrics {','.join(dep.metrics_urls)}  "
                f"logs {dep.workdir / 'logs'}",
                markup=False,
                highlight=False,
            )
            for n in dep.notes:
                err.print(f"note: {n}", markup=False, highlight=False)
            err.print(
                f"bench it: toolchain bench --url {dep.url} --protocol openai-chat --model {dep.model} "
                f"--tokenizer {dep.workdir / 'model'} --metrics-url {','.join(dep.metrics_urls)}",
                markup=False,
                highlight=False,
            )
        with contextlib.suppress(KeyboardInterrupt):
            serve_until(dep, stop.is_set)
    finally:
        recorded.close()
        dep.stop()
    err.print("stopped")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="dynamo")
