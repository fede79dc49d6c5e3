"""`toolchain serve`: run tritonserver on a model repository until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        repo: Annotated[Path, typer.Argument(help="Model repository directory")],
        host: Annotated[str, typer.Option("--host", help="Bind address")] = "127.0.0.1",
        http_port: Annotated[int, typer.Option("--http-port", min=1, max=65535)] = 8000,
        grpc_port: Annotated[int, typer.Option("--grpc-port", min=1, max=65535)] = 8001,
        metrics_port: Annotated[int, typer.Option("--metrics-port", min=1, max=65535)] = 8002,
        ready_timeout: Annotated[
            float, typer.Option("--ready-timeout", min=1, max=86400, help="Seconds to wait for readiness")
        ] = 180,
        world_size: Annotated[
            int | None, typer.Option("--world-size", min=1, max=1024, help="Ranks (default: the engine's)")
        ] = None,
    ) -> None:
        """Start tritonserver (NVIDIA's on a GPU host, the nvidia-pytriton one on CPU) and wait for readiness.

        Examples: toolchain serve ./repo --http-port 18000 --grpc-port 18001 --metrics-port 18002
        """
        import signal
        import time

        from toolchain.cli.render import Stages, err
        from toolchain.triton import server as S
        from toolchain.triton.lint import lint_repository, read_repo_meta

        meta = read_repo_meta(repo)
        ws = world_size or int((meta.get("engine") or {}).get("world_size") or 1)
        errors = [f for f in lint_repository(repo, world_size=ws) if f.severity == "error"]
        if errors:
            from toolchain.errors import TritonRepoError

            raise TritonRepoError(
                f"the repository does not pass lint: {errors[0].line()}", f"run `toolchain triton lint {repo}`"
            )
        srv = S.start(
            repo,
            host=host,
            ports=S.Ports(http_port, grpc_port, metrics_port),
            ready_timeout=ready_timeout,
            world_size=ws,
            progress=Stages(),
        )
        if meta.get("reference"):
            err.print("serving the CPU reference model (PyTorch), not TensorRT-LLM", highlight=False)
        err.print(
            f"ready: HTTP {srv.http_url}  gRPC {srv.grpc_url}  metrics {srv.metrics_url}  log {srv.log_path}",
            highlight=False,
            markup=False,
        )
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *a: stop.update(now=True))
        try:
            while not stop["now"] and srv.proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            srv.stop()
        if srv.proc.returncode not in (0, -15, None) and not stop["now"]:
            from toolchain.errors import ServerError

            raise ServerError(f"tritonserver exited with {srv.proc.returncode}", log_path=srv.log_path)
        err.print("stopped")
