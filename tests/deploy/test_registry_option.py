"""`--registry` says the same thing in every command's help and does what its help says (issue 49: `deploy -h` said
"default: $TOOLCHAIN_REGISTRY, else $TOOLCHAIN_CACHE/registry" while `deploy` without --registry said "Error:
--registry is required", and ignored $TOOLCHAIN_REGISTRY).

Two meanings, read from each command's help: a command that works on this machine defaults to $TOOLCHAIN_REGISTRY,
else the local cache's registry; a command that writes for a cluster needs a registry the pods can reach: it takes
$TOOLCHAIN_REGISTRY, and never the local cache."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from tests.deploy.conftest import SHIPPED

LOCAL = "default: $TOOLCHAIN_REGISTRY, else $TOOLCHAIN_CACHE/registry"
POD = "default: $TOOLCHAIN_REGISTRY, never the local cache"
DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
KEY = "e" * 64
IMAGE = "registry.example/toolchain@sha256:" + "0" * 64


def _registry_helps() -> dict[str, str]:
    """Each command that takes --registry, and that option's help as `COMMAND --help` prints it."""

    from toolchain.cli.main import command_tree

    out: dict[str, str] = {}

    def walk(path: list[str], cmd: Any) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk([*path, name], sub)
        for p in getattr(cmd, "params", []):
            if "--registry" in p.opts:
                out[" ".join(path)] = " ".join(str(p.help).split())

    walk([], command_tree())
    return out


HELPS = _registry_helps()


def test_every_registry_help_says_one_of_the_two_defaults() -> None:
    assert len(HELPS) >= 15, HELPS  # cache, job, build, quantize, triton emit, up, matrix, deploy, dynamo deploy
    for command, text in HELPS.items():
        assert (LOCAL in text) or (POD in text), (command, text)
    pods = {c for c, t in HELPS.items() if POD in t and LOCAL not in t}
    assert pods == {"deploy", "dynamo deploy"}, pods  # matrix says both: the local default, the cluster formats'


def test_a_deploy_takes_toolchain_registry_and_never_the_local_cache(
    cli: Cli, tiny_spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert POD in HELPS["deploy"] and "required to write a deployment" in HELPS["deploy"]
    monkeypatch.delenv("TOOLCHAIN_REGISTRY", raising=False)
    r = cli("deploy", tiny_spec_file, "--out", tmp_path / "none")
    assert r.exit_code == 2 and "Error: --registry is required" in r.stderr, r.output
    assert not (tmp_path / "none").exists()
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", "s3://b/from-env")
    r = cli("deploy", tiny_spec_file, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    env = {e["name"]: e.get("value") for e in _pod(tmp_path / "o")["containers"][0]["env"]}
    assert env["TOOLCHAIN_REGISTRY"] == "s3://b/from-env"
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", str(tmp_path / "local-registry"))  # a path: no pod reaches it
    r = cli("deploy", tiny_spec_file, "--out", tmp_path / "p")
    assert r.exit_code == 2 and "a pod cannot reach" in r.stderr, r.output


def _pod(out: Path) -> dict[str, Any]:
    doc = yaml.safe_load((out / "k8s" / "deployment.yaml").read_text())
    return dict(doc["spec"]["template"]["spec"])


def test_a_dynamo_deploy_takes_toolchain_registry_and_never_the_local_cache(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert POD in HELPS["dynamo deploy"] and "required with --engine" in HELPS["dynamo deploy"]
    args = ("dynamo", "deploy", DISAGG, "--engine", KEY, "--toolchain-image", IMAGE, "--estimator", "floor")
    monkeypatch.delenv("TOOLCHAIN_REGISTRY", raising=False)
    r = cli(*args, "--out", tmp_path / "none")
    assert r.exit_code == 2 and "--engine needs --registry" in r.stderr, r.output
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", "s3://b/from-env")
    r = cli(*args, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert "s3://b/from-env" in (tmp_path / "o" / "dynamographdeployment.yaml").read_text()
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", str(tmp_path / "local-registry"))
    r = cli(*args, "--out", tmp_path / "p")
    assert r.exit_code != 0 and "a path of this machine" in r.stderr, r.output


def test_matrix_for_a_cluster_takes_toolchain_registry(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert POD in HELPS["matrix"] and LOCAL in HELPS["matrix"]
    args = ("matrix", SHIPPED[0], "--format", "kubernetes", "--offline", "--image", "r.example/b:1", "--json")
    monkeypatch.delenv("TOOLCHAIN_REGISTRY", raising=False)
    r = cli(*args, "--out", tmp_path / "none")
    assert r.exit_code == 2 and "--registry is required" in r.stderr, r.output
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", "s3://b/from-env")
    r = cli(*args, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["registry"] == "s3://b/from-env"


@pytest.mark.parametrize("command", ["cache ls", "build"])
def test_a_local_command_defaults_to_toolchain_registry_else_the_cache(
    cli: Cli, command: str, tiny_spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LOCAL in HELPS[command]

    def registry_used() -> str:
        if command == "cache ls":
            r = cli("cache", "ls", "--json")
        else:
            r = cli("build", tiny_spec_file, "--all", "--dry-run", "--json")
        assert r.exit_code == 0, r.output
        return str(json.loads(r.stdout)["registry"])

    monkeypatch.delenv("TOOLCHAIN_REGISTRY", raising=False)
    assert registry_used() == str(Path(os.environ["TOOLCHAIN_CACHE"]) / "registry")
    (tmp_path / "env-registry" / "manifests").mkdir(parents=True)  # `cache ls` refuses a named one that is absent
    monkeypatch.setenv("TOOLCHAIN_REGISTRY", str(tmp_path / "env-registry"))
    assert registry_used() == str(tmp_path / "env-registry")
