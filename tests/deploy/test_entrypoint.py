"""The image's entrypoint, run for real on this machine: pull by key from a moto S3 registry on 127.0.0.1,
verify, start tritonserver with the CPU reference model, answer the readiness probe; refuse a corrupt engine."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers import deploy_reference, env_from_manifest, run_entrypoint, s3_bucket, stop_entrypoint
from toolchain.deploy import DeployOptions
from toolchain.digest import dir_digest
from toolchain.pipeline.fleet import deploy_cell
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.triton.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.server]


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
    registry = s3_bucket(s3_env, "good")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    out = deploy_reference(tiny_spec_file, tmp_path, registry, reference_key)
    env, container = env_from_manifest(out)
    probe = container["readinessProbe"]["httpGet"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(named[probe["port"]]) == env["HTTP_PORT"]  # the probe's port is the one the server binds
    url = f"http://127.0.0.1:{ports['HTTP_PORT']}{probe['path']}"
    log = tmp_path / "entrypoint.log"
    proc = run_entrypoint(out, {**ports, "READY_TIMEOUT": "240"}, log)
    try:
        yield proc, url, log
    finally:
        stop_entrypoint(proc)


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
    assert "(manifest sha256:" in text  # the pull was pinned to the manifest deployed
    restored = next((tmp_path / "engines").iterdir())
    assert (restored / "config.json").is_file() and (restored / "model.safetensors").is_file()
    live = url.replace("/ready", "/live")
    assert _status(live) == 200


def test_a_corrupt_engine_exits_before_serving(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> None:
    import boto3

    registry = s3_bucket(s3_env, "corrupt")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    s3 = boto3.client("s3", endpoint_url=s3_env)
    blobs = s3.list_objects_v2(Bucket="corrupt", Prefix="engines/blobs/")["Contents"]
    big = max(blobs, key=lambda o: o["Size"])
    body = bytearray(s3.get_object(Bucket="corrupt", Key=big["Key"])["Body"].read())
    body[len(body) // 2] ^= 0xFF  # same size, one bit pattern changed
    s3.put_object(Bucket="corrupt", Key=big["Key"], Body=bytes(body))
    out = deploy_reference(tiny_spec_file, tmp_path, registry, reference_key)
    log = tmp_path / "entrypoint.log"
    proc = run_entrypoint(out, ports, log)
    try:
        rc = proc.wait(120)
    finally:
        stop_entrypoint(proc)
    text = log.read_text()
    assert rc != 0, text
    assert "does not match its digest" in text and "not serving" in text
    assert _status(f"http://127.0.0.1:{ports['HTTP_PORT']}/v2/health/ready") is None  # nothing ever listened


def test_an_entry_replaced_after_the_deploy_is_refused(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> None:
    """A pod starts with an empty cache, so only the digest written at deploy time stops it from serving what
    whoever can write the registry put under the key since (measured before: the pod pulled and served it)."""
    import boto3

    registry = s3_bucket(s3_env, "replaced")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    record = boto3.client("s3", endpoint_url=s3_env).get_object(
        Bucket="replaced", Key=f"engines/manifests/{reference_key}.json"
    )["Body"]
    deployed = "sha256:" + hashlib.sha256(record.read()).hexdigest()  # what `cache pull --digest` compares (S3)
    out = deploy_reference(tiny_spec_file, tmp_path, registry, reference_key)
    assert env_from_manifest(out)[0].get("ENGINE_DIGEST") == deployed
    swapped = tmp_path / "swapped"  # other weights under the same key: a forced push after the deploy
    shutil.copytree(tiny_checkpoint, swapped)
    weights = swapped / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    open_registry(registry).put(reference_key, swapped, kind="checkpoint", force=True)
    log = tmp_path / "entrypoint.log"
    proc = run_entrypoint(out, ports, log)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and "restored " not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        rc = proc.poll()
    finally:
        stop_entrypoint(proc)
    text = log.read_text()
    assert rc is not None and rc != 0, text  # it exited on its own, before serving
    assert "not the pinned" in text and "not serving" in text, text
    assert not (tmp_path / "engines" / reference_key).exists()
    assert _status(f"http://127.0.0.1:{ports['HTTP_PORT']}/v2/health/ready") is None


def test_a_repository_for_another_engine_is_refused(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, ports: dict[str, str], tmp_path: Path
) -> None:
    registry = s3_bucket(s3_env, "other")
    open_registry(registry).put(reference_key, tiny_checkpoint, kind="checkpoint")
    out = deploy_reference(tiny_spec_file, tmp_path, registry, reference_key)
    log = tmp_path / "entrypoint.log"
    proc = run_entrypoint(out, {**ports, "ENGINE_KEY": "b" * 64}, log)
    try:
        rc = proc.wait(60)
    finally:
        stop_entrypoint(proc)
    assert rc != 0 and "was made for engine" in log.read_text()


@pytest.fixture
def group(tiny_spec_file: Path, tiny_checkpoint: Path, reference_key: str, tmp_path: Path) -> tuple[Path, Path, str]:
    """A TP2 tiny cell on nodes of one GPU: a LeaderWorkerSet of two pods; the registry is a local directory."""
    d = yaml.safe_load(tiny_spec_file.read_text())
    d["matrix"]["tp"] = [2]
    spec = tmp_path / "tp2.yaml"
    spec.write_text(yaml.safe_dump(d))
    registry = tmp_path / "registry"
    open_registry(str(registry)).put(reference_key, tiny_checkpoint, kind="checkpoint")
    out = deploy_reference(spec, tmp_path, str(registry), reference_key, gpus_per_node=1, registry_pvc="engines")
    fake = tmp_path / "bin"
    fake.mkdir()
    # `kubectl exec -n NS POD ...` (the leader asking a pod whether its engine is restored) succeeds only for
    # pods the test marked ready; `kubectl get pods` lists the group
    (fake / "kubectl").write_text(
        '#!/bin/sh\necho "$@" >> "$FAKE_LOG.kubectl"\n'
        'if [ "$1" = exec ]; then [ -e "$FAKE_LOG.ready-$4" ]; exit $?; fi\n'
        'printf "%s" "grp-0-1 grp-0"\n'
    )
    (fake / "mpirun").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$FAKE_LOG.mpirun"\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    return out, registry, f"{fake}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


def test_group_leader_starts_every_rank_through_kubessh(group: tuple[Path, Path, str], tmp_path: Path) -> None:
    out, registry, path = group
    env, _ = env_from_manifest(out, "leader")
    assert (env["TOOLCHAIN_NODES"], env["TOOLCHAIN_GPUS_PER_NODE"], env["TOOLCHAIN_WORLD_SIZE"]) == ("2", "1", "2")
    log = tmp_path / "leader.log"
    fake_log = tmp_path / "fake"
    for pod in ("grp-0", "grp-0-1"):
        Path(f"{fake_log}.ready-{pod}").touch()
    proc = run_entrypoint(
        out,
        {
            "TOOLCHAIN_REGISTRY": str(registry),
            "GROUP_KEY": "g1",
            "POD_NAMESPACE": "llm",
            "PATH": path,
            "FAKE_LOG": str(fake_log),
        },
        log,
        role="leader",
    )
    try:
        rc = proc.wait(120)
    finally:
        stop_entrypoint(proc)
    assert rc == 0, log.read_text()
    assert "leaderworkerset.sigs.k8s.io/group-key=g1" in Path(f"{fake_log}.kubectl").read_text()
    argv = Path(f"{fake_log}.mpirun").read_text().splitlines()
    assert argv[:7] == [
        "--allow-run-as-root",
        "-mca",
        "plm_rsh_agent",
        str(out / "image/kubessh"),
        "--host",
        "grp-0:1,grp-0-1:1",
        "-x",
    ]
    ranks = " ".join(argv).split(" : ")
    assert len(ranks) == 2
    assert "/opt/tritonserver/bin/tritonserver" in ranks[0] and "--http-port=8000" in ranks[0]
    assert "--load-model=tensorrt_llm" in ranks[1] and "--allow-http=false" in ranks[1]
    assert os.access(out / "image/kubessh", os.X_OK)
    dockerfile = (out / "image/Dockerfile").read_text()
    assert (
        "https://pkgs.k8s.io/core:/stable:/v1.34/deb/" in dockerfile
        and "install -y --no-install-recommends kubectl" in dockerfile
    )


def test_group_worker_restores_the_engine_and_waits(group: tuple[Path, Path, str], tmp_path: Path) -> None:
    out, registry, path = group
    log = tmp_path / "worker.log"
    proc = run_entrypoint(out, {"TOOLCHAIN_REGISTRY": str(registry), "PATH": path}, log, role="worker")
    try:
        deadline = time.monotonic() + 120
        while "worker ready" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        stop_entrypoint(proc)
    assert any((tmp_path / "engines").iterdir())


def test_pytorch_runtime_starts_trtllm_serve_on_the_restored_checkpoint(
    tiny_spec_file: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    d = yaml.safe_load(tiny_spec_file.read_text())
    d["runtime"] = "pytorch"  # the LLM API runtime needs TensorRT-LLM >= 1.2 and a container that has it
    d["target"].update(trtllm_version="1.2.1", container="nvcr.io/nvidia/tensorrt-llm/release:1.2.1")
    d["matrix"]["tp"] = [2]
    spec = tmp_path / "pt.yaml"
    spec.write_text(yaml.safe_dump(d))
    artifact = tmp_path / "artifact"
    (artifact / "hf").mkdir(parents=True)
    for f in tiny_checkpoint.iterdir():
        (artifact / "hf" / f.name).write_bytes(f.read_bytes())
    (artifact / "extra_llm_api_options.yaml").write_text("kv_cache_config: {free_gpu_memory_fraction: 0.9}\n")
    # a warm bundle made on an H100 with 1.2.1: this host has neither, so its caches never reach trtllm-serve
    (artifact / "caches").mkdir()
    (artifact / "caches" / "autotuner.cache").write_text("{}")
    made = {"gpu": "NVIDIA H100 80GB HBM3", "trtllm_version": "1.2.1", "shape": {"tp": 2}}
    env = {"TLLM_AUTOTUNER_CACHE_PATH": "caches/autotuner.cache"}
    (artifact / "bundle.json").write_text(json.dumps({"state": "warm", "made_for": made, "env": env}))
    key = "c" * 64
    registry = tmp_path / "registry"
    open_registry(str(registry)).put(key, artifact, kind="llmapi")
    out = tmp_path / "deploy"
    deploy_cell(
        load_spec(spec),
        cell_id=None,
        out=out,
        engine=key,
        options=DeployOptions(
            registry=str(registry),
            registry_pvc="engines",
            image_root=str(out / "image"),
            engines_root=str(tmp_path / "engines"),
        ),
    )
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "trtllm-serve").write_text(
        '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$FAKE_LOG"\n'
        'printf "%s" "${TLLM_AUTOTUNER_CACHE_PATH:-}" > "$FAKE_LOG.env"\n'
    )
    (fake / "trtllm-serve").chmod(0o755)
    log = tmp_path / "serve.log"
    proc = run_entrypoint(
        out,
        {
            "TOOLCHAIN_REGISTRY": str(registry),
            "PATH": f"{fake}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "FAKE_LOG": str(tmp_path / "argv"),
        },
        log,
    )
    try:
        rc = proc.wait(120)
    finally:
        stop_entrypoint(proc)
    assert rc == 0, log.read_text()
    dest = tmp_path / "engines" / key
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == [
        str(dest / "hf"),
        "--backend",
        "pytorch",
        "--tp_size",
        "2",
        "--pp_size",
        "1",
        "--extra_llm_api_options",
        str(dest / "extra_llm_api_options.yaml"),
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert (dest / "hf" / "config.json").is_file()
    assert (tmp_path / "argv.env").read_text() == ""  # the bundle was made for another GPU and TensorRT-LLM
    assert "warning: cold start, the bundle's caches are not used: made on NVIDIA H100" in log.read_text()


def test_group_leader_waits_for_every_pod_to_restore_its_engine(group: tuple[Path, Path, str], tmp_path: Path) -> None:
    """A worker is Running long before its `cache pull` ends; the leader starts no rank until each pod says
    its engine is restored (measured before: mpirun ran as soon as the pods were Running)."""
    out, registry, path = group
    fake_log = tmp_path / "fake"
    Path(f"{fake_log}.ready-grp-0").touch()  # the leader's own pod; the worker grp-0-1 never gets there
    log = tmp_path / "leader.log"
    overrides = {
        "TOOLCHAIN_REGISTRY": str(registry),
        "GROUP_KEY": "g1",
        "POD_NAMESPACE": "llm",
        "PATH": path,
        "FAKE_LOG": str(fake_log),
        "READY_TIMEOUT": "5",
    }
    proc = run_entrypoint(out, overrides, log, role="leader")
    try:
        rc = proc.wait(120)
    finally:
        stop_entrypoint(proc)
    text = log.read_text()
    assert rc != 0 and "pod grp-0-1 has not restored engine" in text, text
    assert not Path(f"{fake_log}.mpirun").exists()
    assert "exec -n llm grp-0-1 -c server -- test -f" in Path(f"{fake_log}.kubectl").read_text()


def test_entrypoint_scripts_parse_in_dash_and_bash() -> None:
    """The image's /bin/sh may be dash or bash: both must parse the scripts (bash -n found an apostrophe
    inside ${VAR:?message} that dash accepts and bash reads as an open quote)."""
    import shutil

    for script in ("entrypoint.sh", "kubessh"):
        path = Path(__file__).resolve().parents[2] / "toolchain" / "deploy" / script
        for shell in ("dash", "bash"):
            if shutil.which(shell) is None:
                continue
            r = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True)
            assert r.returncode == 0, f"{shell} -n {script}: {r.stderr}"
