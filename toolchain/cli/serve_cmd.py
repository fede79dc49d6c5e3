"""`toolchain serve`: run tritonserver on a model repository until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import WorldSizeOpt


def serve(
    repo: Annotated[Path, typer.Argument(help="Model repository directory")],
    host: Annotated[str, typer.Option("--host", help="Bind address")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option("--http-port", min=1, max=65535)] = 8000,
    grpc_port: Annotated[int, typer.Option("--grpc-port", min=1, max=65535)] = 8001,
    metrics_port: Annotated[int, typer.Option("--metrics-port", min=1, max=65535)] = 8002,
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", min=1, max=86400, help="Seconds to wait for readiness")
    ] = 180,
    world_size: WorldSizeOpt = None,
) -> None:
    """Start tritonserver (NVIDIA's on a GPU host, the nvidia-pytriton one on CPU) and wait for readiness.

    Examples: toolchain serve ./repo --http-port 18000 --grpc-port 18001 --metrics-port 18002
    """
    import signal
    import threading
    from typing import Any

    from toolchain.cli.render import Stages, err
    from toolchain.triton.server import Ports, Server
    from toolchain.triton.serving import serve_repository

    stop = threading.Event()
    stages = Stages()

    def ready(srv: Server, meta: dict[str, Any]) -> None:
        # From here SIGTERM asks for a clean stop (before, it ends the start as it always did).
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        stages.settle()  # every model is ready: no bar or "still ..." line after the ready line
        if meta.get("stand_in"):
            err.print(f"serving the {meta['stand_in']}", highlight=False, markup=False)
        elif meta.get("reference"):
            err.print("serving the CPU reference model (PyTorch), not TensorRT-LLM", highlight=False)
        if srv.ready_s is not None:
            from toolchain.triton.llmapi_repo import start_from_log

            start = start_from_log(srv.log_path)
            err.print(f"ready in {srv.ready_s:.1f} s{f' ({start})' if start else ''}", highlight=False, markup=False)
        err.print(
            f"ready: HTTP {srv.http_url}  gRPC {srv.grpc_url}  metrics {srv.metrics_url}  log {srv.log_path}",
            highlight=False,
            markup=False,
        )

    serve_repository(
        repo,
        stop=stop,
        host=host,
        ports=Ports(http_port, grpc_port, metrics_port),
        ready_timeout=ready_timeout,
        world_size=world_size,
        on_ready=ready,
        progress=stages,
    )
    err.print("stopped")


def register(app: typer.Typer) -> None:
    app.command()(serve)
