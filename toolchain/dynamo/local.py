"""Run a spec's Dynamo topology on this machine: frontend (OpenAI HTTP + router) and the Dynamo mocker
(stand-in for dynamo.trtllm) as the prefill/decode or aggregated workers, every listener on 127.0.0.1.

No etcd and no NATS: file discovery (``DYN_DISCOVERY_BACKEND=file``, one directory shared by the processes),
the TCP request plane and the ZMQ event plane in broker mode through ``zmq_broker.py`` bound on 127.0.0.1 (in
1.6.1 direct-mode publishers bind 0.0.0.0). The mocker's ``--bootstrap-ports`` rendezvous also binds 0.0.0.0
and has no host flag, so it is not used: the frontend sends a request to prefill, then to decode. The
frontend writes its model-card cache under ``$HOME/.cache/dynamo`` (``XDG_CACHE_HOME`` is not read), so
``HOME`` is the run directory's ``home/`` for the Dynamo processes only.

Each process runs under ``toolchain.watchdog`` in its own session: it dies with the process that
started it, even by SIGKILL, and takes its own children with it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.dynamo.plan import DynamoPlan, PoolPlan
from toolchain.dynamo.timing import WorkerTiming, write_profile
from toolchain.errors import ServerError, UserInputError
from toolchain.proc import Popen, spawn_guarded, stop_group, tail, wait_ready
from toolchain.progress import Progress, silent
from toolchain.specs.matrix import Cell

STAND_IN = "the Dynamo mocker (stand-in for dynamo.trtllm)"
HOST = "127.0.0.1"
MAX_LOCAL_WORKERS = 4  # per pool, one process each
BROKER = Path(__file__).with_name("zmq_broker.py")


@dataclass
class Proc:
    name: str  # broker | frontend | prefill | decode | workers
    cmd: list[str]
    log: Path
    popen: Popen[bytes]
    system_port: int | None = None

    @property
    def metrics_url(self) -> str | None:
        return f"http://{HOST}:{self.system_port}/metrics" if self.system_port else None


@dataclass
class LocalDeployment:
    workdir: Path
    model: str
    http_port: int
    mode: str
    speedup: float
    procs: list[Proc] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def frontend_metrics_url(self) -> str:
        return f"{self.url}/metrics"

    @property
    def metrics_urls(self) -> list[str]:
        """The frontend's and every worker process's Prometheus endpoint."""
        return [self.frontend_metrics_url] + [p.metrics_url for p in self.procs if p.metrics_url]

    def workers(self, role: str) -> list[Proc]:
        """The processes of one pool (prefill, decode or workers)."""
        return [p for p in self.procs if p.name.rsplit("-", 1)[0] == role]

    def check_alive(self) -> None:
        """Raise, naming the process and its log tail, when one of them has exited."""
        for p in self.procs:
            if p.popen.poll() is not None:
                raise ServerError(
                    f"{_label(p.name)} exited with code {p.popen.returncode}:\n{tail(p.log, 10)}", log_path=p.log
                )

    def stop(self, grace: float = 10.0) -> None:
        for p in reversed(self.procs):
            stop_group(p.popen, grace)

    def describe(self) -> dict[str, Any]:
        return {
            "stand_in": STAND_IN,
            "mode": self.mode,
            "url": self.url,
            "model": self.model,
            "metrics": self.metrics_urls,
            "speedup_ratio": self.speedup,
            "workdir": str(self.workdir),
            "tokenizer": str(self.workdir / "model"),
            "processes": [
                {"name": p.name, "pid": p.popen.pid, "log": str(p.log), "metrics": p.metrics_url, "command": p.cmd}
                for p in self.procs
            ],
            "notes": self.notes,
        }

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _label(name: str) -> str:
    return {"broker": "the ZMQ event broker", "frontend": "the Dynamo frontend"}.get(name, f"{STAND_IN}, {name}")


def free_port() -> int:
    from toolchain.triton.server import free_port as fp

    return fp(HOST)


def system_port() -> int:
    """A free port below 32768: Dynamo 1.6.1 reads ``DYN_SYSTEM_PORT`` as an i16 and refuses larger ones."""
    import random
    import socket

    for _ in range(200):
        port = random.randint(20000, 32767)
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
        return port
    raise ServerError("no free port between 20000 and 32767 on 127.0.0.1 for a Dynamo worker's status server")


def timing_of(pool: PoolPlan, plan: DynamoPlan, cell: Cell) -> WorkerTiming:
    return WorkerTiming(
        prefill_ms_per_token=pool.prefill_ms / max(1, plan.avg_input),
        step_base_ms=pool.step_base_ms,
        step_ms_per_kv_token=pool.step_ms_per_kv_token,
        max_input_len=cell.max_input_len,
        max_seq_len=cell.max_seq_len,
        kv_tokens=pool.kv_tokens,
    )


def default_speedup(plan: DynamoPlan) -> float:
    """Scale so one planned decode step takes about 4 ms here: long enough to stand above the CPU's own
    per-token cost, short enough that a few hundred output tokens take a second or two."""
    step = max((p.step_ms for p in plan.pools if p.step_ms), default=4.0)
    return max(1.0, round(step / 4.0, 2))


def mocker_args(
    cell: Cell, plan: DynamoPlan, pool: PoolPlan, *, card: Path, profile: Path, speedup: float, workers: int
) -> list[str]:
    """``python -m dynamo.mocker`` flags for one pool, from the cell and the plan."""
    spec = cell.spec
    s, b = spec.serving, spec.build
    block = b.tokens_per_block
    mode = {"workers": "agg", "prefill": "prefill", "decode": "decode"}[pool.role]
    args = [
        "--model-path", str(card),
        "--model-name", spec.name,
        "--engine-type", "trtllm",
        "--discovery-backend", "file",
        "--disaggregation-mode", mode,
        "--num-workers", str(workers),
        "--block-size", str(block),
        "--num-gpu-blocks-override", str(max(1, pool.kv_tokens // block)),
        "--max-num-seqs", str(cell.max_batch_size),
        "--max-num-batched-tokens", str(b.max_num_tokens),
        "--max-model-len", str(cell.max_seq_len),
        # the whole model's KV bytes per token: what one request's transfer moves
        "--kv-bytes-per-token", str(int(plan.kv_bytes_per_request / max(1, plan.avg_input))),
        "--planner-profile-data", str(profile),
        "--speedup-ratio", f"{speedup:g}",
        "--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching",
        "--enable-chunked-prefill" if s.enable_chunked_prefill else "--no-enable-chunked-prefill",
    ]  # fmt: skip
    if plan.mode == "disaggregated":
        lanes = min(p.tp for p in plan.pools)
        args += ["--kv-transfer-bandwidth", f"{plan.link_gb_s * lanes:g}"]
    else:
        args += ["--kv-transfer-bandwidth", "0"]
    return args


def frontend_args(cell: Cell, http_port: int) -> list[str]:
    d = cell.spec.dynamo
    assert d is not None
    return [
        "--http-host", HOST,
        "--http-port", str(http_port),
        "--discovery-backend", "file",
        "--router-mode", d.router,
        "--kv-cache-block-size", str(cell.spec.build.tokens_per_block),
    ]  # fmt: skip


def environment(workdir: Path, broker: tuple[int, int]) -> dict[str, str]:
    """What every Dynamo process here shares: offline Hub, file discovery, TCP request plane, loopback hosts,
    the broker's URLs, and HOME/TMPDIR inside the run directory."""
    env = dict(os.environ)
    for d in ("kv", "home", "tmp"):
        (workdir / d).mkdir(parents=True, exist_ok=True)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DYN_DISCOVERY_BACKEND="file",
        DYN_FILE_KV=str(workdir / "kv"),
        DYN_REQUEST_PLANE="tcp",
        DYN_EVENT_PLANE="zmq",
        DYN_TCP_RPC_HOST=HOST,
        DYN_EVENT_PLANE_HOST=HOST,
        DYN_SYSTEM_HOST=HOST,
        DYN_HTTP_RPC_HOST=HOST,
        DYN_TCP_RESPONSE_STREAM_HOST=HOST,
        DYN_ZMQ_BROKER_URL=f"xsub=tcp://{HOST}:{broker[0]} , xpub=tcp://{HOST}:{broker[1]}",
        HOME=str(workdir / "home"),
        TMPDIR=str(workdir / "tmp"),
        PYTHONUNBUFFERED="1",
    )
    env.pop("PYTHONPATH", None)  # Dynamo's interpreter runs its own packages only
    env.pop("DYN_SYSTEM_PORT", None)
    return env


def _launch(name: str, cmd: list[str], logs: Path, env: dict[str, str], system_port: int | None = None) -> Proc:
    """Start ``cmd`` under the watchdog in a new session; its output goes to ``logs/NAME.log``."""
    log = logs / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    penv = dict(env)
    if system_port is not None:
        penv["DYN_SYSTEM_PORT"] = str(system_port)  # the worker's /metrics and /health
    return Proc(name, cmd, log, spawn_guarded(cmd, log, penv), system_port)


def _get(url: str, timeout: float = 1.0) -> bytes | None:
    """One GET polled by its caller: the body of a 2xx answer, None otherwise (nothing answered, or an error)."""
    from toolchain import http

    resp = http.probe("GET", url, timeout=timeout)
    return resp.content if resp is not None and resp.is_success else None


def _warm_up(dep: LocalDeployment) -> bool:
    """One one-token chat completion through the frontend; True when it streamed back."""
    from toolchain import http

    body = {"model": dep.model, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 1, "stream": False}
    resp = http.probe("POST", f"{dep.url}/v1/chat/completions", timeout=10, json=body)
    return resp is not None and resp.status_code == 200


def requests_served(metrics_url: str, component: str) -> float:
    """``dynamo_component_requests_total`` of a worker's ``generate`` endpoint (component prefill or backend)."""
    from toolchain.bench import prom

    body = _get(metrics_url, 2.0)
    if body is None:
        return 0.0
    snap = prom.parse(body.decode("utf-8", "replace"))
    return snap.total("dynamo_component_requests_total", dynamo_component=component, dynamo_endpoint="generate")


def _ready(dep: LocalDeployment) -> str | None:
    """None when the topology serves (disaggregated: a request went through the prefill worker), else what
    it is still waiting for."""
    models = _get(f"{dep.url}/v1/models")
    if models is None:
        return "frontend not answering yet"
    try:
        names = [m.get("id") for m in json.loads(models).get("data", [])]
    except (ValueError, AttributeError):
        names = []
    if dep.model not in names:
        return "waiting for a worker to register the model"
    for p in dep.procs:
        if p.metrics_url and _get(p.metrics_url) is None:
            return f"{p.name} worker's status server not up"
    if not _warm_up(dep):
        return "warm-up request failed"
    prefills = sum(requests_served(p.metrics_url or "", "prefill") for p in dep.workers("prefill"))
    if dep.mode == "disaggregated" and prefills < 1:
        return "the frontend has not activated its prefill router yet"
    return None


def start_local(
    cell: Cell,
    plan: DynamoPlan,
    card: Path,
    *,
    workdir: Path,
    python: str,
    http_port: int | None = None,
    speedup: float | None = None,
    ready_timeout: float = 120.0,
    progress: Progress = silent,
) -> LocalDeployment:
    """Start the broker, the frontend and one mocker process per pool; wait until a request goes through."""
    if speedup is not None and not speedup > 0:
        raise UserInputError(f"--speedup must be a positive number, not {speedup}", "e.g. --speedup 10")
    ratio = speedup if speedup is not None else default_speedup(plan)
    port = http_port or free_port()
    from toolchain.triton.server import check_port

    check_port(HOST, port, "http")
    workdir.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    broker = (free_port(), free_port())
    env = environment(workdir, broker)
    dep = LocalDeployment(workdir, cell.spec.name, port, plan.mode, ratio)
    try:
        dep.procs.append(_launch("broker", [python, str(BROKER), str(broker[0]), str(broker[1])], logs, env))
        dep.procs.append(_launch("frontend", [python, "-m", "dynamo.frontend", *frontend_args(cell, port)], logs, env))
        for pool in plan.pools:
            n = min(pool.replicas, MAX_LOCAL_WORKERS)
            if n < pool.replicas:
                dep.notes.append(f"{pool.role}: running {n} of the {pool.replicas} planned workers")
            profile = write_profile(workdir / f"timing-{pool.role}.npz", timing_of(pool, plan, cell))
            # one process per worker: each has its own status server, so its metrics are its own
            for i in range(n):
                args = mocker_args(cell, plan, pool, card=card, profile=profile, speedup=ratio, workers=1)
                cmd = [python, "-m", "dynamo.mocker", *args]
                dep.procs.append(_launch(f"{pool.role}-{i}", cmd, logs, env, system_port=system_port()))
        _wait_ready(dep, ready_timeout, progress)
    except BaseException:
        dep.stop(5)
        raise
    return dep


def _wait_ready(dep: LocalDeployment, timeout: float, progress: Progress) -> None:
    wait_ready(
        lambda: _ready(dep),
        timeout=timeout,
        stage=f"starting Dynamo ({dep.mode}, {STAND_IN})",
        progress=progress,
        alive=dep.check_alive,
        poll=0.3,
        on_timeout=lambda why: ServerError(
            f"the Dynamo deployment was not ready within {timeout:.0f} s ({why}); logs in {dep.workdir / 'logs'}",
            hint=f"read {dep.workdir / 'logs'}/*.log",
        ),
    )


def serve_until(dep: LocalDeployment, stop: Callable[[], bool], poll: float = 0.5) -> None:
    """Supervise ``dep`` until ``stop()`` is true; a process that dies on its own is an error."""
    while not stop():
        dep.check_alive()
        time.sleep(poll)
