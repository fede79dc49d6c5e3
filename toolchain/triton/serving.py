"""`toolchain serve`: lint a repository, start tritonserver on it, and keep it up until asked to stop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain.errors import ServerError, TritonRepoError
from toolchain.progress import Progress, silent
from toolchain.triton.lint import lint_repository, read_repo_meta
from toolchain.triton.server import Ports, Server, start


def serve_repository(
    repo: Path,
    *,
    stop: threading.Event,
    host: str = "127.0.0.1",
    ports: Ports | None = None,
    ready_timeout: float = 180.0,
    world_size: int | None = None,
    on_ready: Callable[[Server, dict[str, Any]], None] = lambda srv, meta: None,
    progress: Progress = silent,
) -> None:
    """Serve ``repo`` until ``stop`` is set (or Ctrl-C); a server that dies on its own is an error.

    The caller owns signals: it sets ``stop`` from its SIGTERM handler (a library installs none)."""
    meta = read_repo_meta(repo)
    ws = world_size or int((meta.get("engine") or {}).get("world_size") or 1)
    errors = [f for f in lint_repository(repo, world_size=ws) if f.severity == "error"]
    if errors:
        raise TritonRepoError(
            f"the repository does not pass lint: {errors[0].line()}", f"run `toolchain triton lint {repo}`"
        )
    srv = start(repo, host=host, ports=ports, ready_timeout=ready_timeout, world_size=ws, progress=progress)
    try:
        on_ready(srv, meta)
        while not stop.is_set() and srv.proc.poll() is None:
            stop.wait(0.5)
    except KeyboardInterrupt:
        stop.set()
    finally:
        srv.stop(progress=progress)
    if srv.proc.returncode not in (0, -15, None) and not stop.is_set():
        raise ServerError(f"tritonserver exited with {srv.proc.returncode}", log_path=srv.log_path)
