"""`dynamo deploy --public-key` (and `toolchain deploy` on a Dynamo spec): the pull init container requires the
artifact signed by that key. The DynamoGraphDeployment validates against its recorded schema with the key's
ConfigMap, and the init container's own command line, run here against a local registry (the pod's registry and
paths swapped for this machine's), refuses an unsigned entry (exit 6) and restores a signed one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from tests.deploy.conftest import render_kustomization
from toolchain.registry import open_registry

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
IMAGE = "registry.example/toolchain@sha256:" + "0" * 64
KEY = "ab" * 32


def _keys(cli: Cli, tmp_path: Path) -> tuple[Path, Path]:
    r = cli("cache", "keygen", tmp_path / "keys")
    assert r.exit_code == 0, r.output
    return tmp_path / "keys" / "cosign.key", tmp_path / "keys" / "cosign.pub"


def _write(cli: Cli, out: Path, pub: Path, *verb: str) -> dict[str, Any]:
    image = "--toolchain-image" if verb[0] == "dynamo" else "--image"
    r = cli(*verb, DISAGG, "--out", out, "--engine", KEY, "--registry", "s3://models/llm", image, IMAGE,
            "--public-key", pub)  # fmt: skip
    assert r.exit_code == 0, r.output
    d: dict[str, Any] = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return d


@pytest.mark.slow
def test_the_pull_step_requires_the_signature(
    cli: Cli, tmp_path: Path, validate_manifest: Callable[[dict[str, Any]], None], monkeypatch: Any
) -> None:
    engine_dir = tmp_path / "artifact"
    (engine_dir / "hf").mkdir(parents=True)
    (engine_dir / "rank0.engine").write_bytes(os.urandom(4096))
    (engine_dir / "hf" / "config.json").write_text("{}")
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    private, pub = _keys(cli, tmp_path)
    out = tmp_path / "dgd"
    d = _write(cli, out, pub, "dynamo", "deploy")
    resources = render_kustomization(out)
    for res in resources:
        validate_manifest(res)
    (cm,) = [r for r in resources if r["metadata"]["name"].endswith("-signing-key")]
    assert cm["data"]["cosign.pub"] == pub.read_text()
    inits = [c["podTemplate"]["spec"]["initContainers"][0] for c in d["spec"]["components"][1:]]
    for init in inits:
        assert init["args"][-3:] == ["--require-signature", "--public-key", "/etc/toolchain/keys/cosign.pub"]
        assert {"name": "signing-key", "mountPath": "/etc/toolchain/keys", "readOnly": True} in init["volumeMounts"]
    # toolchain deploy on the Dynamo spec writes the same
    d2 = _write(cli, tmp_path / "dgd2", pub, "deploy")
    assert d2 == d

    # the init container's command, with this machine's registry and paths for the pod's
    reg = str(tmp_path / "reg")
    r = open_registry(reg)
    r.put(KEY, engine_dir)
    key_path = tmp_path / "mounted" / "cosign.pub"
    key_path.parent.mkdir()
    key_path.write_text(cm["data"]["cosign.pub"])
    init = inits[0]
    cmd = [*init["command"], *init["args"]]
    cmd = [sys.executable if c == "python3" else c for c in cmd]
    cmd[cmd.index("--registry") + 1] = reg
    cmd[cmd.index("--public-key") + 1] = str(key_path)
    dest = tmp_path / "models" / KEY
    cmd[cmd.index(f"/models/{KEY}")] = str(dest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCHAIN_")} | {"PYTHONPATH": str(REPO)}
    env["TOOLCHAIN_CACHE"] = str(tmp_path / "cache")
    unsigned = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert unsigned.returncode == 6, unsigned.stderr
    assert not dest.exists()
    signed = cli("cache", "sign", KEY, "--sign", private, "--registry", reg)
    assert signed.exit_code == 0, signed.output
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr
    assert (dest / "rank0.engine").read_bytes() == (engine_dir / "rank0.engine").read_bytes()


def test_a_public_key_without_an_engine_is_a_one_line_error(cli: Cli, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    _private, pub = _keys(cli, tmp_path)
    r = cli("dynamo", "deploy", DISAGG, "--out", tmp_path / "o", "--public-key", pub)
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "--engine" in r.output
    assert not (tmp_path / "o").exists()
