"""Helpers shared by more than one test module, imported by their public names (never a test module's privates).

Product modules are imported inside the functions that need them, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolchain.bench.metrics import RequestRecord
    from toolchain.bench.workload import Request
    from toolchain.deploy.manifests import Target

REPO = Path(__file__).resolve().parents[1]

# --- processes ------------------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child nobody has collected yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def wait_for(cond: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` seconds pass; whether it held (checked once more at the end).

    A bound for waiting on a condition, never a measure of speed: pick ``timeout`` far above the time it takes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return bool(cond())


# --- specs ----------------------------------------------------------------------------------------------------


def copied_tiny_spec(root: Path) -> Path:
    """engine_specs/tiny.yaml copied to ``root/specs/tiny.yaml``, as a fresh clone has it: its model.source,
    ``../.work/tiny-llama``, then points at ``root/.work/tiny-llama``, which does not exist. The checkout's own
    ``.work/tiny-llama`` is what `toolchain up engine_specs/tiny.yaml` (the README's first command) creates, so a
    test that needs the checkpoint missing never reads the checkout's spec."""
    spec = root / "specs" / "tiny.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "engine_specs" / "tiny.yaml", spec)
    assert not (root / ".work" / "tiny-llama").exists()
    return spec


# --- stalls ---------------------------------------------------------------------------------------------------


def assert_stall_named(res: Any, stopped: str, setting: str, waits: str | None = None) -> str:
    """A command that met a stalled peer: exit 75, one `Error:` line saying ``stopped`` and naming the
    ``setting`` that bounds the wait, no traceback; with ``waits``, the progress lines that said what it waited on
    (starting ``waits``) were there and fit 80 columns. The error line."""
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == 75 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert stopped in lines[0] and setting in lines[0], lines[0]
    if waits is not None:
        said = [ln for ln in res.output.splitlines() if waits in ln]
        assert said and all(len(ln) <= 80 for ln in said), res.output
    return str(lines[0])


# --- bench ----------------------------------------------------------------------------------------------------


def bench_requests(n: int, tokens: int = 4) -> list[Request]:
    """``n`` two-token prompts asking for ``tokens`` output tokens each."""
    from toolchain.bench.workload import Request

    return [Request(f"p{i}", 2, tokens) for i in range(n)]


class BlockingTarget:
    """A bench target whose request handling blocks the event loop for ``block_s`` before it sends."""

    def __init__(self, block_s: float, serve_s: float = 0.01) -> None:
        self.block_s, self.serve_s = block_s, serve_s

    async def one(self, req: Request, rec: RequestRecord) -> None:
        time.sleep(self.block_s)  # e.g. CPU-heavy request building in the client
        rec.sent = time.perf_counter()
        await asyncio.sleep(self.serve_s)
        rec.chunk_times = [time.perf_counter(), time.perf_counter() + 1e-4]
        rec.output_tokens = 2


def bench_result(runs: list[dict[str, Any]], *, stop: str | None = None, interrupted: str | None = None) -> Any:
    """A ``BenchResult`` holding ``runs`` (load points as dicts: label and summary at least), as a run ends."""
    from toolchain.bench.result import BenchResult

    return BenchResult.model_validate(
        {"kind": "toolchain.bench-result", "provenance": {}, "runs": runs, "stop": stop, "interrupted": interrupted}
    )


def whole_bench_result() -> dict[str, Any]:
    """A bench result as `bench --save` writes one, from the metrics code itself."""
    from toolchain.bench.metrics import RequestRecord, aggregate

    recs = [
        RequestRecord(i, 8, 5, 0.0, chunk_times=[0.05 + k * 0.01 for k in range(5)], output_tokens=5) for i in range(4)
    ]
    recs.append(RequestRecord(9, 8, 5, 0.0, error="HTTP 500: boom", error_kind="server"))
    run = {
        "load": {"concurrency": 1},
        "label": "concurrency=1",
        "summary": aggregate(recs, 1.0, {"ttft_ms": 400.0, "tpot_ms": 40.0}),
        "server": None,
        "client": {"warnings": ["w"]},
        "prefix": None,
        "records": [r.to_json() for r in recs],
        "interrupted": None,
    }
    return {"kind": "toolchain.bench-result", "schema": 1, "provenance": {}, "runs": [run], "interrupted": None}


# --- checkpoints ----------------------------------------------------------------------------------------------

GOOD_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
}


def safetensors_bytes(header: dict[str, Any]) -> bytes:
    """A safetensors file's length prefix and JSON header (the caller appends the tensor data)."""
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


# --- Triton repositories --------------------------------------------------------------------------------------


def model_config(repo: Path, model: str) -> Any:
    """``repo/model/config.pbtxt`` parsed into Triton's ModelConfig protobuf."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    return text_format.Parse((repo / model / "config.pbtxt").read_text(), pb.ModelConfig())


def fake_engine_dir(
    d: Path,
    *,
    tp: int = 1,
    pp: int = 1,
    batch: int = 8,
    seq: int = 256,
    beam: int = 1,
    kv: str | None = "FP8",  # the tiny spec's quantization.kv_cache: fp8
    **plugin: Any,
) -> Path:
    """A TensorRT-LLM engine directory as far as emission and lint read one: config.json and a file per rank."""
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "pretrained_config": {
                    "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp},
                    "logits_dtype": "float32",
                    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": kv},
                },
                "build_config": {
                    "max_batch_size": batch,
                    "max_input_len": 128,
                    "max_seq_len": seq,
                    "max_beam_width": beam,
                    "kv_cache_type": "PAGED",
                    "plugin_config": {"use_paged_context_fmha": True, "tokens_per_block": 32, **plugin},
                },
            }
        )
    )
    for r in range(tp * pp):
        (d / f"rank{r}.engine").write_bytes(b"x")
    return d


# --- deploy ---------------------------------------------------------------------------------------------------


def deploy_target(app: str = "app") -> Target:
    """A manifests Target with every field set to a plausible production value."""
    from toolchain.deploy.manifests import Target

    return Target(
        app=app,
        image="registry.example.com/llm:v1",
        engine_key="a" * 64,
        registry="s3://engines/prod",
        registry_secret="engine-registry",
        registry_pvc=None,
        frontend="openai",
        engines_root="/engines",
        model_repository="/opt/toolchain/model_repository",
        queue_target_ms=200,
        prometheus_url="http://prometheus.monitoring.svc:9090",
    )


def s3_bucket(endpoint: str, name: str) -> str:
    """Create bucket ``name`` at the S3 ``endpoint`` (moto); the registry URL of its ``engines`` prefix."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/engines"


def deploy_reference(spec_file: Path, tmp: Path, registry: str, key: str, **options: Any) -> Path:
    """`deploy` of the spec's cell with the CPU reference model, the image's /opt/toolchain laid out under ``tmp``."""
    from toolchain.deploy import DeployOptions
    from toolchain.pipeline.fleet import deploy_cell
    from toolchain.specs.loader import load_spec

    out = tmp / "deploy"
    deploy_cell(
        load_spec(spec_file),
        cell_id=None,
        out=out,
        engine=key,
        reference=True,
        options=DeployOptions(
            registry=registry,
            registry_secret="engine-registry",
            frontend="kserve",  # the OpenAI frontend needs the container's tritonserver bindings
            image_root=str(out / "image"),  # lay the image's /opt/toolchain out here
            engines_root=str(tmp / "engines"),
            **options,
        ),
    )
    return out


def env_from_manifest(out: Path, role: str = "server") -> tuple[dict[str, str], dict[str, Any]]:
    """The literal env values and the container of ``role`` in the deploy output's manifests."""
    import yaml

    if role == "server":
        pod = yaml.safe_load((out / "k8s/deployment.yaml").read_text())["spec"]["template"]["spec"]
    else:
        group = yaml.safe_load((out / "k8s/leaderworkerset.yaml").read_text())["spec"]["leaderWorkerTemplate"]
        pod = group[f"{role}Template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == [role]
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}, c


def run_entrypoint(out: Path, overrides: dict[str, str], log: Path, role: str = "server") -> subprocess.Popen[bytes]:
    """The image's entrypoint.sh as ``role``, with the manifest's env (and ``overrides``), in its own session."""
    env, _ = env_from_manifest(out, role)
    env = {**os.environ, **env, **overrides}
    env["TOOLCHAIN_PYTHON"] = sys.executable
    env["PATH"] = overrides.get("PATH") or f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [str(out / "image/entrypoint.sh"), role],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_entrypoint(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the entrypoint's process group, SIGKILL it if it is still there after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# A real pull (Registry.get) run as `python -c SLOW_PULL REGISTRY KEY DEST`, with one injected pause after its
# first file lands: alive for as long as a test needs to kill it with its staging directory half full.
SLOW_PULL = """
import sys, time
from pathlib import Path
from toolchain.registry import open_registry
from toolchain.registry import backends

real = backends.LocalBackend.restore
def slow(self, *a, **kw):
    got = real(self, *a, **kw)
    print("landed", flush=True)
    time.sleep(600)
    return got
backends.LocalBackend.restore = slow
open_registry(sys.argv[1]).get(sys.argv[2], Path(sys.argv[3]))
"""
