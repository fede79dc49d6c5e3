"""Start and stop `tritonserver` on a model repository.

On a CPU machine: the Triton 2.51 binary from the `nvidia-pytriton` wheel with its Python backend
(backend dir with the stub for this Python, venv first on PATH, numpy < 2; docs/triton-on-cpu.md).
On a GPU host: `/opt/tritonserver/bin/tritonserver` from NVIDIA's container, and `mpirun` with
one rank per GPU when the engine's world size is > 1 (the command launch_triton_server.py builds).
Bound to 127.0.0.1 unless told otherwise; readiness has its own deadline (a stub that cannot start
makes tritonserver hang in "loading" forever); stop removes the shared-memory regions it made.
The server runs under ``toolchain.watchdog``, so neither it nor its Python-backend stubs
outlive the process that started them.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import socket
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.artifacts.layout import cache
from toolchain.errors import ServerError, UserInputError
from toolchain.proc import Popen, capture, spawn_guarded, stop_group, tail, wait_ready
from toolchain.progress import Heartbeat, Progress, silent
from toolchain.triton.metrics_config import metrics_args

CONTAINER_TRITON = Path("/opt/tritonserver/bin/tritonserver")
STUB_FAILURES = ("error while loading shared libraries", "triton_python_backend_stub is not found")


@dataclass
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


@dataclass
class Server:
    proc: Popen[bytes]
    repo: Path
    host: str
    ports: Ports
    log_path: Path
    shm_prefix: str
    command: list[str] = field(default_factory=list)
    ready_s: float | None = None  # from launching the process to every model ready

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.ports.metrics}/metrics"

    def stop(self, grace: float = 15.0, progress: Progress = silent) -> None:
        """SIGTERM the server's process group (SIGKILL after ``grace`` s). Unloading the models takes seconds
        (the Python stubs exit one by one), so ``progress`` hears about it every second."""
        if self.proc.poll() is None:
            with Heartbeat(progress, "stopping tritonserver", lambda: stop_states(self.log_path)):
                stop_group(self.proc, grace)
        else:
            stop_group(self.proc, grace)
        for f in glob.glob(f"/dev/shm/{self.shm_prefix}*"):
            with contextlib.suppress(OSError):
                os.unlink(f)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port(host: str, port: int, what: str) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserInputError(
                f"{what} port {port} on {host} is already in use",
                f"stop what listens there or pass another --{what}-port",
            ) from exc


def pytriton_dir() -> Path:
    try:
        import pytriton
    except ImportError as exc:
        from toolchain.errors import MissingDependencyError

        raise MissingDependencyError("pytriton", "triton") from exc
    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def _check_python_env() -> None:
    import numpy

    if int(numpy.__version__.split(".")[0]) >= 2:
        raise ServerError(
            f"numpy {numpy.__version__} is installed; Triton's Python backend needs numpy < 2",
            hint="pip install 'numpy<2' in the serving environment",
        )


def prepare_backends(ts: Path) -> Path:
    """A backend dir whose python/ holds the stub for this interpreter's minor version."""
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = ts / "python_backend_stubs" / minor / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(
            f"the Triton wheel has no Python backend stub for Python {minor}",
            hint="use Python 3.8-3.13 for the serving environment",
        )
    ldd = capture(["ldd", str(stub)], timeout=30)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    missing = [ln.split()[0] for ln in ldd.stdout.splitlines() if "not found" in ln]
    if missing and not any(Path(libdir, m).exists() for m in missing):
        raise ServerError(
            f"the Python {minor} backend stub cannot load {', '.join(missing)} (tritonserver would hang)",
            hint=f"install libpython{minor} (Debian: apt install libpython{minor}) or use a Python with a shared lib",
        )
    bk = cache().triton_backends()
    (bk / "python").mkdir(parents=True, exist_ok=True)
    for src in (
        ts / "backends" / "python" / "libtriton_python.so",
        ts / "backends" / "python" / "triton_python_backend_utils.py",
        stub,
    ):
        dst = bk / "python" / src.name
        if dst.is_symlink() and dst.resolve() == src.resolve():
            continue
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{threading.get_ident()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(src)
        tmp.replace(dst)  # atomic: a server starting beside this one sees the old link or the new one
    return bk


def container_command(binary: Path, repo: Path, net: list[str], shm_prefix: str, world_size: int) -> list[str]:
    """The command launch_triton_server.py builds (docs/triton-backend.md): one tritonserver per rank under mpirun;
    ranks > 0 load only tensorrt_llm; each rank gets its own Python shared-memory prefix."""

    def rank_args(rank: int | None) -> list[str]:
        prefix = shm_prefix if rank is None else f"{shm_prefix}r{rank}_"
        args = [
            str(binary),
            f"--model-repository={repo}",
            *net,
            "--disable-auto-complete-config",
            f"--backend-config=python,shm-region-prefix-name={prefix}",
        ]
        if rank:
            args += ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]
        return args

    if world_size <= 1:
        return rank_args(None)
    cmd = ["mpirun", "--allow-run-as-root"]
    for rank in range(world_size):
        cmd += ["-n", "1", *rank_args(rank), ":"]
    return cmd[:-1]


def _failed_models(log: str) -> list[str]:
    return sorted(set(re.findall(r"failed to load '([^']+)'", log)))


def start(
    repo: Path,
    *,
    host: str = "127.0.0.1",
    ports: Ports | None = None,
    log_path: Path | None = None,
    ready_timeout: float = 120.0,
    world_size: int = 1,
    extra_args: list[str] | None = None,
    progress: Progress = silent,
) -> Server:
    """Start tritonserver on ``repo`` and wait until every model is ready (or fail with the log tail)."""
    repo = Path(repo).resolve()
    if not repo.is_dir():
        raise UserInputError(f"{repo} is not a model repository directory", "emit one with `toolchain triton emit`")
    ports = ports or Ports()
    for what, port in (("http", ports.http), ("grpc", ports.grpc), ("metrics", ports.metrics)):
        check_port(host, port, what)
    log_path = log_path or cache().server_log()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    shm_prefix = f"tc{os.getpid()}x{ports.grpc}_"
    env = dict(os.environ)
    net = _net_args(host, ports)
    if CONTAINER_TRITON.is_file():
        cmd = container_command(CONTAINER_TRITON, repo, net, shm_prefix, world_size)
    else:
        cmd = _pytriton_command(repo, net, shm_prefix, world_size, env)
    cmd += extra_args or []
    launched = time.monotonic()
    proc = _launch(cmd, log_path, env, shm_prefix)
    server = Server(proc, repo, host, ports, log_path, shm_prefix, cmd)
    progress(f"tritonserver starting: log {log_path}")
    try:
        wait_ready(
            lambda: None if _is_ready(server.http_url) else "loading",
            timeout=ready_timeout - (time.monotonic() - launched),
            stage="tritonserver loading models",
            progress=progress,
            alive=lambda: _raise_if_failed(proc, log_path),
            probe=lambda: model_states(server.http_url, log_path),
            on_timeout=lambda why: ServerError(
                f"tritonserver was not ready within {ready_timeout:.0f} s:\n{tail(log_path, 12)}", log_path=log_path
            ),
        )
        server.ready_s = round(time.monotonic() - launched, 2)  # from the launch, not from the wait's start
        return server
    except BaseException:
        server.stop(5)
        raise


def _net_args(host: str, ports: Ports) -> list[str]:
    """tritonserver's address and port flags for HTTP, gRPC and metrics, and the latency metrics it exports."""
    return [
        f"--http-address={host}",
        f"--http-port={ports.http}",
        f"--grpc-address={host}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-address={host}",
        f"--metrics-port={ports.metrics}",
        *metrics_args(),
    ]


def _pytriton_command(repo: Path, net: list[str], shm_prefix: str, world_size: int, env: dict[str, str]) -> list[str]:
    """The command of the nvidia-pytriton wheel's tritonserver (one rank only); sets PATH and LD_LIBRARY_PATH
    in ``env`` for its Python backend stub."""
    if world_size > 1:
        raise ServerError(
            f"the engine has {world_size} ranks; serving it needs NVIDIA's Triton container on {world_size} GPUs",
            hint="run `toolchain serve` on the GPU host",
        )
    _check_python_env()
    ts = pytriton_dir()
    bk = prepare_backends(ts)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"
    libs = [str(ts.parent / "nvidia_pytriton.libs")]
    # The stub embeds libpython; it must be this interpreter's own (a distro libpython of another
    # patch release mixes with this stdlib and fails to import extension modules such as _ssl).
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if glob.glob(f"{libdir}/libpython{sys.version_info[0]}.{sys.version_info[1]}*.so*"):
        libs.insert(0, libdir)
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    return [
        str(ts / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={bk}",
        f"--cache-directory={ts / 'caches'}",
        *net,
        "--allow-gpu-metrics=false",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
    ]


def _launch(cmd: list[str], log_path: Path, env: dict[str, str], shm_prefix: str = "") -> Popen[bytes]:
    """Start ``cmd`` under the watchdog in a new session, its output (after the command line) in ``log_path``.
    The watchdog ties the server's whole tree (tritonserver or mpirun, and the Python-backend stubs) to this
    process: it dies with us even on SIGKILL, and the stubs die with the server."""
    return spawn_guarded(cmd, log_path, env, watchdog_args=("--shm-prefix", shm_prefix) if shm_prefix else ())


def _raise_if_failed(proc: Popen[bytes], log_path: Path) -> None:
    """Raise with the log tail when tritonserver exited or its Python backend stub could not start."""
    if proc.poll() is not None:
        text = log_path.read_text(errors="replace")
        failed = _failed_models(text)
        which = f" (model{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed to load)" if failed else ""
        raise ServerError(
            f"tritonserver exited with code {proc.returncode}{which}:\n{tail(log_path, 12)}", log_path=log_path
        )
    text = log_path.read_text(errors="replace")
    if any(s in text for s in STUB_FAILURES):
        raise ServerError(f"the Python backend stub could not start:\n{tail(log_path, 8)}", log_path=log_path)


def _is_ready(http_url: str) -> bool:
    """Whether the server answers its readiness endpoint with 200 (False while it cannot be reached)."""
    from toolchain import http

    resp = http.probe("GET", f"{http_url}/v2/health/ready", timeout=1)
    return resp is not None and resp.status_code == 200


_LOADING = re.compile(r'"loading: ([^:"]+):\d+"')
_LOADED = re.compile(r"\"successfully loaded '([^']+)'")
_FAILED = re.compile(r"failed to load '([^']+)'")


_UNLOADED = re.compile(r"\"successfully unloaded '([^']+)'")
_LIVE = re.compile(r"Found (\d+) live models")
_SHUTDOWN = "Waiting for in-flight requests"


def stop_states(log_path: Path) -> str | None:
    """How far tritonserver's shutdown has come, from its own log lines (``server.cc`` counts the live
    models each second; ``model_lifecycle.cc`` names each one unloaded), short enough for the live bar of an
    80-column terminal: e.g. '3 of 6 unloaded (last tensorrt_llm)' — not a raw log line."""
    text = tail(log_path, 400)
    start = text.rfind(_SHUTDOWN)
    if start < 0 and not _LIVE.search(text):
        return "waiting for its shutdown to begin"
    text = text[max(start, 0) :]  # the shutdown's start may have scrolled out of the tail: its counts are there
    unloaded = list(dict.fromkeys(_UNLOADED.findall(text)))
    live = [int(n) for n in _LIVE.findall(text)]
    if not live:
        return f"{len(unloaded)} unloaded" if unloaded else "waiting for in-flight requests"
    total = max(max(live), len(unloaded) + live[-1])
    models = "the model" if total == 1 else f"all {total} models"
    if live[-1] == 0:
        return f"{models} unloaded"
    if not unloaded:
        return f"{total} model{'' if total == 1 else 's'} live"
    last = unloaded[-1] if len(unloaded[-1]) <= 16 else unloaded[-1][:15] + "…"
    return f"{len(unloaded)} of {total} unloaded (last {last})"


def model_states(http_url: str, log_path: Path | None = None) -> str | None:
    """Model load states, e.g. 'ensemble READY, tensorrt_llm LOADING'.

    From Triton's repository index API once the HTTP service is up; tritonserver starts its endpoints
    only after the initial load, so until then the states come from its own log lines (loading: /
    successfully loaded / failed to load).
    """
    from toolchain import http

    resp = http.probe("POST", f"{http_url}/v2/repository/index", timeout=0.5, content=b"{}")
    if resp is not None and resp.status_code == 200:
        with contextlib.suppress(ValueError, AttributeError):
            models = json.loads(resp.content)
            return ", ".join(f"{m.get('name')} {m.get('state') or 'UNAVAILABLE'}" for m in models) or None
    if log_path is None:
        return None
    text = tail(log_path, 400)
    states: dict[str, str] = {}
    for line in text.splitlines():
        for rx, state in ((_LOADING, "LOADING"), (_LOADED, "READY"), (_FAILED, "UNAVAILABLE")):
            m = rx.search(line)
            if m:
                states[m.group(1)] = state
    return ", ".join(f"{k} {v}" for k, v in sorted(states.items())) or None
