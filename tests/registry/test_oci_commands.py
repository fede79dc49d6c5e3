"""oci:// through the commands, against the real registry on 127.0.0.1: every `cache` command, `build
--registry` (with the trtllm-build stand-in), `matrix` (one tags list for every cell), `deploy` and the pod
entrypoint restoring the engine from the OCI registry (and refusing a corrupt one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, write_tiny_spec
from tests.helpers import deploy_reference, env_from_manifest, stop_entrypoint
from tests.servers import RegistryServer
from toolchain.pipeline.matrix import build_matrix
from toolchain.registry import open_registry
from toolchain.registry.store import FEW_KEYS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
FAKES = Path(__file__).resolve().parents[1] / "fakes"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_cache_command_on_an_oci_registry(oci_url: str, tmp_path: Path, cli: Any) -> None:
    src = tmp_path / "engine"
    src.mkdir()
    (src / "rank0.engine").write_bytes(os.urandom(200_000))
    (src / "config.json").write_text("{}")
    key = "a1" * 32
    r = cli("cache", "push", src, "--key", key, "--registry", oci_url)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == key
    ls = json.loads(cli("cache", "ls", "--registry", oci_url, "--json").stdout)
    assert [e["key"] for e in ls["entries"]] == [key] and ls["registry"] == oci_url
    shown = json.loads(cli("cache", "show", key[:12], "--registry", oci_url).stdout)
    assert shown["files"]["rank0.engine"]["digest"].startswith("sha256:")
    assert cli("cache", "tag", key[:12], "prod", "--registry", oci_url).exit_code == 0
    assert cli("cache", "pull", "prod", tmp_path / "out", "--registry", oci_url).exit_code == 0
    assert _tree(tmp_path / "out") == _tree(src)
    assert cli("cache", "verify", "--registry", oci_url).exit_code == 0
    gc = cli("cache", "gc", "--registry", oci_url, "--yes", "--json")
    assert gc.exit_code == 0 and "garbage-collect" in json.loads(gc.stdout)["note"]
    open_registry(oci_url).backend.delete(f"manifests/{key}.json")  # the entry goes; its tag dangles
    gc = cli("cache", "gc", "--registry", oci_url, "--yes", "--json")
    assert gc.exit_code == 0 and json.loads(gc.stdout)["tags"] == 1
    assert open_registry(oci_url).tags() == {}


def test_matrix_asks_the_oci_registry_once_for_all_cells(oci_url: str, tmp_path: Path) -> None:
    reg = open_registry(oci_url)
    specs = sorted(SPECS.glob("*.yaml"))
    first = build_matrix(specs, registry=reg)["build"]
    assert len(first) > FEW_KEYS and not any(b["cached"] for b in first)
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    hit = next(b for b in first if b["engine_key"])
    reg.put(hit["engine_key"], tmp_path / "eng")
    b: Any = reg.backend
    b.requests.clear()
    again = build_matrix(specs, registry=reg)["build"]
    assert [c["id"] for c in again if c["cached"]] == [hit["id"]]
    assert b.requests == [("GET", f"/v2/{oci_url.split('/', 3)[3]}/tags/list")]


@pytest.mark.slow
def test_build_publishes_to_the_oci_registry_and_is_cached_there(
    oci_url: str, tiny_checkpoint: Path, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "py"))
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(tiny_checkpoint)
    d["quantization"]["calibration"].update(samples=8, seq_len=32)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(d))
    from tests.compile.test_build_e2e import _quantized_cell

    _quantized_cell(spec)  # the build's input, as `toolchain quantize` leaves it
    r = cli("build", spec, "--all", "--registry", oci_url, "--json")
    assert r.exit_code == 0, r.output
    (cell,) = json.loads(r.stdout)["cells"]
    assert cell["status"] == "built"
    m = open_registry(oci_url).show(cell["engine_key"])
    assert {"config.json", "rank0.engine"} <= set(m.files) and m.provenance["command"][0] == "trtllm-build"
    again = json.loads(cli("build", spec, "--all", "--registry", oci_url, "--json").stdout)["cells"]
    assert again[0]["status"] == "cached"


@pytest.mark.slow
def test_the_pod_entrypoint_restores_from_oci_and_refuses_a_corrupt_engine(
    oci_url: str,
    oci_server: RegistryServer,
    tiny_checkpoint: Path,
    tmp_path: Path,
) -> None:
    from toolchain.digest import dir_digest

    key = dir_digest(tiny_checkpoint).split(":", 1)[1]
    m = open_registry(oci_url).put(key, tiny_checkpoint, kind="checkpoint")
    out = deploy_reference(write_tiny_spec(tmp_path / "tiny.yaml", tiny_checkpoint), tmp_path, oci_url, key)
    env, _ = env_from_manifest(out)
    assert env["TOOLCHAIN_REGISTRY"] == oci_url
    run_env = {**os.environ, **env, "TOOLCHAIN_PYTHON": sys.executable, "TOOLCHAIN_OCI_PLAIN_HTTP": "1"}
    run_env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    log = tmp_path / "worker.log"
    # the worker role pulls, verifies, lints and then only waits: what a pod does before it serves
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [str(out / "image/entrypoint.sh"), "worker"],
            env=run_env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ready = tmp_path / "engines" / f".ready-{key}"
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
    finally:
        stop_entrypoint(proc)
    assert _tree(tmp_path / "engines" / key) == _tree(tiny_checkpoint)
    big = max(m.files.values(), key=lambda f: f.size)
    blob = oci_server.blob_data(big.digest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    rc = subprocess.run(
        [str(out / "image/entrypoint.sh"), "worker"], env=run_env, capture_output=True, text=True, timeout=180
    )
    assert rc.returncode != 0
    assert "does not match its digest" in rc.stderr and "not serving" in rc.stderr


def test_up_and_triton_emit_fetch_the_engine_from_oci(oci_url: str, tmp_path: Path) -> None:
    """`toolchain up` and `triton emit` restore a cell's engine with `pipeline.emit.fetch_engine`."""
    from toolchain.pipeline.emit import fetch_engine

    src = tmp_path / "engine"
    src.mkdir()
    (src / "config.json").write_text('{"build_config": {}}')
    (src / "rank0.engine").write_bytes(os.urandom(50_000))
    key = "a2" * 32
    reg = open_registry(oci_url)
    reg.put(key, src)
    reg.tag(key, "cell-prod")
    path, got = fetch_engine("cell-prod", oci_url)
    assert got == key and _tree(path) == _tree(src)
