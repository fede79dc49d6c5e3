"""`toolchain deploy`: container build context and Kubernetes manifests for one cell."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import (
    CellOpt,
    DryRunOpt,
    EngineDigestOpt,
    ForceOpt,
    Frontend,
    JsonOpt,
    PodRegistryOpt,
    SpecArg,
    out_dir_opt,
)


def deploy(
    spec: SpecArg,
    cell: CellOpt = None,
    out: Annotated[Path | None, out_dir_opt("image/, k8s/, deploy.json")] = None,
    registry: PodRegistryOpt = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="Registry key or tag to serve (default: the cell's engine key)")
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Image to run: repository@sha256:digest (recommended, once built) or repository:tag to build "
            "(default <app>:<key>); on a Dynamo spec, the image with the toolchain that pulls the artifact",
        ),
    ] = None,
    registry_secret: Annotated[
        str | None,
        typer.Option(
            "--registry-secret",
            help="Secret (by name) with the registry credentials: AWS_*, HF_TOKEN or TOOLCHAIN_OCI_*",
        ),
    ] = None,
    registry_pvc: Annotated[
        str | None, typer.Option("--registry-pvc", help="PersistentVolumeClaim holding a directory registry")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Kubernetes namespace the manifests name (default: default)")
    ] = None,
    frontend: Annotated[
        Frontend | None,
        typer.Option(
            "--frontend",
            help="openai: Triton's OpenAI frontend + KServe (tensorrt default); kserve: tritonserver; "
            "trtllm-serve (pytorch default)",
        ),
    ] = None,
    prometheus_url: Annotated[
        str, typer.Option("--prometheus-url", help="Prometheus the autoscaler queries")
    ] = "http://prometheus-operated.monitoring.svc:9090",
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs in one node")] = 8,
    min_replicas: Annotated[int | None, typer.Option("--min-replicas", help="Override the planner's floor")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas", help="Override the planner's max")] = None,
    tokenizer: Annotated[
        Path | None, typer.Option("--tokenizer", help="Tokenizer directory (default: the quantized checkpoint's)")
    ] = None,
    reference: Annotated[
        bool, typer.Option("--reference", help="Serve the CPU reference model from a checkpoint KEY (tests, demos)")
    ] = False,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="Public key (cosign.pub, PEM) the entry's signature must verify with: the image refuses to serve "
            "an engine without a valid signature of it",
        ),
    ] = None,
    engine_digest: EngineDigestOpt = None,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a container build context and Kubernetes manifests (kustomize) that serve one cell; on a spec with a
    dynamo block, its DynamoGraphDeployment (what `toolchain dynamo deploy` writes).

    Examples:
      toolchain deploy engine_specs/llama-3.3-70b-fp8-h100.yaml --dry-run
      toolchain deploy engine_specs/llama-3.1-8b-fp8.yaml --cell h100-sxm-b64-s4096-i2048-tp1 \\
        --registry s3://engines/prod --registry-secret engine-registry --image registry.example.com/llm:8b-v1 \\
        --out ./deploy/llama8b
    """
    from toolchain import settings
    from toolchain.cli.render import err, print_json
    from toolchain.cli.render import out as stdout
    from toolchain.deploy import DeployOptions
    from toolchain.errors import UserInputError
    from toolchain.specs.gate import checked_spec

    registry = registry or settings.registry_url()  # as the help says; never the local cache's registry
    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    if s.dynamo is not None:  # the spec serves on NVIDIA Dynamo: its deployment is a DynamoGraphDeployment
        triton_only = {
            "--frontend": frontend is not None,
            "--registry-pvc": registry_pvc is not None,
            "--tokenizer": tokenizer is not None,
            "--reference": reference,
            "--min-replicas": min_replicas is not None,
            "--max-replicas": max_replicas is not None,
        }
        given = [flag for flag, on in triton_only.items() if on]
        if given:
            raise UserInputError(
                f"{', '.join(given)} configure a Triton deployment; this spec serves on NVIDIA Dynamo, whose "
                "pools the Dynamo plan sizes",
                f"drop {', '.join(given)} (or remove the spec's dynamo block for a Triton deployment)",
            )
        _deploy_dynamo(
            spec,
            cell,
            out,
            registry,
            engine,
            image,
            registry_secret,
            namespace,
            public_key,
            engine_digest,
            dry_run,
            force,
            json_out,
        )
        return
    pem = None
    if public_key is not None:
        from toolchain.registry.signing import load_verifier

        load_verifier(public_key)  # a malformed or non-P-256 key is refused here, not at the pod's start
        pem = public_key.read_bytes()
    opts = DeployOptions(
        public_key_pem=pem,
        registry=registry or "",
        image=image,
        registry_secret=registry_secret,
        registry_pvc=registry_pvc,
        namespace=namespace,
        frontend=frontend.value if frontend is not None else None,
        prometheus_url=prometheus_url,
        gpus_per_node=gpus_per_node,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        force=force,
        engine_digest=engine_digest,
    )
    if dry_run:
        from toolchain.cli.render import Stages
        from toolchain.pipeline.fleet import size_only

        stages = Stages(quiet=json_out)
        try:
            c, sizing = size_only(s, cell, opts, stages)
        finally:
            stages.close()
        if json_out:
            print_json({"spec": s.name, "cell": c.id, "sizing": sizing.to_json()})
        else:
            kind = "LeaderWorkerSet" if sizing.multi_node else "Deployment"
            stdout.print(f"cell {c.id}: {kind}, {sizing.gpus_per_replica} GPU(s) per replica", highlight=False)
            for line in sizing.explain():
                stdout.print("  " + line, highlight=False, markup=False)
        return
    if out is None:
        raise UserInputError("--out is required to write a deployment", "pass --out DIR, or --dry-run to size only")
    if not registry:
        raise UserInputError(
            "--registry is required: the pod pulls the engine from it at start",
            "pass --registry s3://bucket/prefix, hf://org/repo or oci://host/repository (or set TOOLCHAIN_REGISTRY)",
        )
    from toolchain.cli.render import Stages
    from toolchain.pipeline.fleet import deploy_cell

    res = deploy_cell(
        s,
        cell_id=cell,
        out=out,
        options=opts,
        engine=engine,
        tokenizer=tokenizer,
        reference=reference,
        progress=Stages(quiet=json_out),
    )
    for w in res.warnings:  # also in --json: a deployment weaker than it could be is said either way
        err.print(f"warning: {w}", highlight=False, markup=False)
    if json_out:
        print_json(res.to_json())
        return
    sz = res.sizing
    for n in res.notes:
        err.print(f"note: {n}", highlight=False, markup=False)
    for f in res.files:
        stdout.print(f"{out / f}", highlight=False, markup=False)
    err.print(
        f"wrote {out} for {res.app}: {sz.min_replicas}..{sz.max_replicas} replica(s) × "
        f"{sz.gpus_per_replica} GPU(s), /dev/shm {sz.shm_bytes / 2**30:.0f} GiB, startup budget "
        f"{sz.startup_budget_s} s",
        highlight=False,
        markup=False,
    )
    build = "" if "@" in res.image else f"docker build -t {res.image} {out / 'image'} && docker push {res.image} && "
    # one line however wide: a command to copy (soft_wrap: the terminal folds it, no line break is added)
    err.print(f"next: {build}kubectl apply -k {out / 'k8s'}", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(deploy)


def _deploy_dynamo(
    spec: Path,
    cell: str | None,
    out: Path | None,
    registry: str | None,
    engine: str | None,
    image: str | None,
    registry_secret: str | None,
    namespace: str | None,
    public_key: Path | None,
    engine_digest: str | None,
    dry_run: bool,
    force: bool,
    json_out: bool,
) -> None:
    """`toolchain deploy` on a spec with a dynamo block: what `toolchain dynamo deploy` writes (--image is the
    image with the toolchain that pulls the artifact, as in the Triton deployment)."""
    from toolchain.cli.render import Stages, err, print_json
    from toolchain.cli.render import out as stdout
    from toolchain.errors import UserInputError

    stages = Stages(quiet=json_out)  # the estimate's start-up (AIConfigurator loads its database) is narrated
    if dry_run:
        from toolchain.dynamo.pipeline import checked_pin, plan_spec

        checked_pin(engine, engine_digest)  # refused as the run refuses it
        try:  # sized as `toolchain dynamo deploy` sizes by default
            planned = plan_spec(spec, cell, estimator="auto", progress=stages)
        finally:
            stages.close()
        if json_out:
            print_json({"spec": planned.cell.spec.name, "cell": planned.cell.id, "plan": planned.plan.to_json()})
            return
        stdout.print(f"cell {planned.cell.id}: DynamoGraphDeployment ({planned.plan.mode})", highlight=False)
        for p in planned.plan.pools:
            stdout.print(f"  {p.role}: {p.replicas} x {p.gpu} TP{p.tp}", highlight=False, markup=False)
        return
    if out is None:
        raise UserInputError("--out is required to write a deployment", "pass --out DIR, or --dry-run to size only")
    from toolchain.dynamo.pipeline import deploy as deploy_dgd

    try:
        res = deploy_dgd(
            spec,
            out,
            cell_id=cell,
            namespace=namespace or "default",
            engine=engine,
            registry=registry,
            registry_secret=registry_secret,
            toolchain_image=image,
            public_key=public_key,
            engine_digest=engine_digest,
            estimator="auto",  # as `toolchain dynamo deploy` sizes by default
            force=force,
            progress=stages,
        )
    finally:
        stages.close()
    for w in res.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False)
    if json_out:
        print_json(res.to_json())
        return
    err.print(f"cell {res.planned.cell.id}: DynamoGraphDeployment, sized by the Dynamo plan", highlight=False)
    for f in res.files.values():
        stdout.print(str(f), highlight=False, markup=False)
    err.print(f"apply with: kubectl apply -k {out}", markup=False, highlight=False, soft_wrap=True)
