"""The image's entrypoint, run for real on this machine: pull by key from a moto S3 registry on 127.0.0.1,
verify, start tritonserver with the CPU reference model, answer the readiness probe; refuse a corrupt engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolchain.deploy import DeployOptions
from toolchain.digest import dir_digest
from toolchain.pipeline.fleet import deploy_cell
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.triton.server import free_port

pytestmark = pytest.mark.slow


def _bucket(endpoint: str, name: str) -> str:
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/engines"


def _deploy(spec_file: Path, tmp: Path, registry: str, key: str) -> Path:
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
        ),
    )
    return out


def _env_from_manifest(out: Path) -> tuple[dict[str, str], dict[str, Any]]:
    dep = yaml.safe_load((out / "k8s/deployment.yaml").read_text())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"]}, c


def _run(out: Path, overrides: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    env, _ = _env_from_manifest(out)
    env = {**os.environ, **env, **overrides}
    env["TOOLCHAIN_PYTHON"] = sys.executable
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [str(out / "image/entrypoint.sh"), "server"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def ports() -> dict[str, str]:
    return {
        "SERVE_HOST": "127.0.0.1",
        "HTTP_PORT": str(free_port()),
        "GRPC_PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
    }


@pytest.fixture
def reference_key(tiny_checkpoint: Path) -> str:
    return dir_digest(tiny_checkpoint).split(":", 1)[1]


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


@pytest.fixture
def served(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    registry = _bucket(s3_env, "good")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    out = _deploy(tiny_spec_file, tmp_path, registry, reference_key)
    env, container = _env_from_manifest(out)
    probe = container["readinessProbe"]["httpGet"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(named[probe["port"]]) == env["HTTP_PORT"]  # the probe's port is the one the server binds
    url = f"http://127.0.0.1:{ports['HTTP_PORT']}{probe['path']}"
    log = tmp_path / "entrypoint.log"
    proc = _run(out, {**ports, "READY_TIMEOUT": "240"}, log)
    try:
        yield proc, url, log
    finally:
        _stop(proc)


def test_pull_verify_serve_and_answer_ready(served: tuple[subprocess.Popen[bytes], str, Path], tmp_path: Path) -> None:
    proc, url, log = served
    deadline = time.monotonic() + 300
    while _status(url) != 200:
        assert proc.poll() is None, f"entrypoint exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not ready in time:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
    # the probe can answer before `toolchain serve` narrates what it serves: give the line a moment
    deadline = time.monotonic() + 30
    while "serving the CPU reference model" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    text = log.read_text()
    assert "pulling" in text and "serving the CPU reference model" in text
    restored = next((tmp_path / "engines").iterdir())
    assert (restored / "config.json").is_file() and (restored / "model.safetensors").is_file()
    live = url.replace("/ready", "/live")
    assert _status(live) == 200


def test_a_corrupt_engine_exits_before_serving(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> None:
    import boto3

    registry = _bucket(s3_env, "corrupt")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    s3 = boto3.client("s3", endpoint_url=s3_env)
    blobs = s3.list_objects_v2(Bucket="corrupt", Prefix="engines/blobs/")["Contents"]
    big = max(blobs, key=lambda o: o["Size"])
    body = bytearray(s3.get_object(Bucket="corrupt", Key=big["Key"])["Body"].read())
    body[len(body) // 2] ^= 0xFF  # same size, one bit pattern changed
    s3.put_object(Bucket="corrupt", Key=big["Key"], Body=bytes(body))
    out = _deploy(tiny_spec_file, tmp_path, registry, reference_key)
    log = tmp_path / "entrypoint.log"
    proc = _run(out, ports, log)
    try:
        rc = proc.wait(120)
    finally:
        _stop(proc)
    text = log.read_text()
    assert rc != 0, text
    assert "does not match its digest" in text and "not serving" in text
    assert _status(f"http://127.0.0.1:{ports['HTTP_PORT']}/v2/health/ready") is None  # nothing ever listened


def test_a_repository_for_another_engine_is_refused(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> None:
    registry = _bucket(s3_env, "other")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    out = _deploy(tiny_spec_file, tmp_path, registry, reference_key)
    log = tmp_path / "entrypoint.log"
    proc = _run(out, {**ports, "ENGINE_KEY": "b" * 64}, log)
    try:
        rc = proc.wait(60)
    finally:
        _stop(proc)
    assert rc != 0 and "was made for engine" in log.read_text()
