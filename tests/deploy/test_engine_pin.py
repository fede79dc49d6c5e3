"""The pods pull one manifest (docs/deploy.md, "The pods pull one manifest"): `toolchain deploy` and `toolchain
dynamo deploy` write the digest of the engine's manifest into the pods (read from the registry where they run, or
given with --engine-digest), so whatever the key names after the deploy is refused at a pod's start; when they
cannot read it they still write the deployment and say so in one line. The entrypoint's side, run for real, is
tests/deploy/test_entrypoint.py (a replaced entry is refused)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from tests.helpers import env_from_manifest, s3_bucket
from toolchain.registry import open_registry

DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
IMAGE = "registry.example/toolchain@sha256:" + "0" * 64
KEY = "ab" * 32
PIN = "sha256:" + "5e" * 32


def _unpinned(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "is not pinned" in ln]


@pytest.mark.slow
def test_a_registry_unreadable_here_is_said_in_one_line(cli: Cli, tiny_spec_file: Path, tmp_path: Path) -> None:
    """S3 without credentials on this machine (the pods get theirs from a Secret): written, unpinned, said once."""
    out = tmp_path / "d"
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", out)
    assert r.exit_code == 0, r.output
    (line,) = _unpinned(r.stderr)
    assert line.startswith("warning: engine ") and "--engine-digest sha256:" in line
    assert "ENGINE_DIGEST" not in env_from_manifest(out)[0]
    assert json.loads((out / "deploy.json").read_text())["engine_digest"] is None
    j = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "j", "--json")
    assert j.exit_code == 0, j.output
    data = json.loads(j.stdout)
    assert data["engine_digest"] is None and len(_unpinned("\n".join(data["warnings"]))) == 1
    assert len(_unpinned(j.stderr)) == 1


@pytest.mark.slow
def test_a_client_that_cannot_start_here_is_a_warning_not_a_traceback(
    cli: Cli, tiny_spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AWS profile this machine does not have: botocore refuses before any request (ProfileNotFound, neither
    an OSError nor the toolchain's error). Before: a traceback from deploy; now the deployment is written, unpinned,
    and the warning says why in words."""
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-here")
    out = tmp_path / "d"
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", out)
    assert r.exit_code == 0, r.output
    (line,) = _unpinned(r.stderr)
    assert "no-such-profile-here" in line and "ProfileNotFound" not in line and "Traceback" not in r.output, line
    assert json.loads((out / "deploy.json").read_text())["engine_digest"] is None


def test_a_hub_manifest_is_read_fresh_and_a_blob_from_the_cache() -> None:
    """huggingface_hub answers a failed HEAD with its cached copy unless force_download: a replaced manifest would
    be served (and pinned) while the Hub is unreachable. A manifest or signature is always fetched; a blob, named
    by its digest, may come from the cache."""
    from toolchain.registry.backends import HFBackend

    calls: list[tuple[str, dict[str, Any]]] = []

    class Api:
        def hf_hub_download(self, repo_id: str, path: str, **kw: Any) -> str:
            calls.append((path, kw))
            f = Path(os.environ["TOOLCHAIN_CACHE"]) / "hub-file"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"{}")
            return str(f)

    hub = HFBackend("org/engines", api=Api())
    for path in (f"manifests/{KEY}.json", f"manifests/{KEY}.sig", "tags/latest", f"blobs/sha256/ab/{KEY}"):
        hub.read_bytes(path)
    assert [(p, kw.get("force_download")) for p, kw in calls] == [
        (f"manifests/{KEY}.json", True),
        (f"manifests/{KEY}.sig", True),
        ("tags/latest", True),
        (f"blobs/sha256/ab/{KEY}", False),
    ]


@pytest.mark.slow
def test_engine_digest_pins_the_pods_without_reading_the_registry(
    cli: Cli, tiny_spec_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "d"
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", out, "--engine-digest", "@" + PIN, "--json")
    assert r.exit_code == 0, r.output
    assert not _unpinned(r.output)
    assert json.loads(r.stdout)["engine_digest"] == PIN
    assert env_from_manifest(out)[0]["ENGINE_DIGEST"] == PIN
    assert json.loads((out / "deploy.json").read_text())["engine_digest"] == PIN


@pytest.mark.parametrize(
    "command",
    [
        ("deploy", "TINY", "--registry", "s3://b/p"),
        ("deploy", "TINY", "--dry-run"),
        ("dynamo", "deploy", str(DISAGG), "--engine", KEY, "--registry", "s3://b/p", "--toolchain-image", IMAGE),
        ("deploy", str(DISAGG), "--engine", KEY, "--registry", "s3://b/p", "--image", IMAGE),
    ],
    ids=["deploy", "deploy-dry-run", "dynamo-deploy", "deploy-dynamo-spec"],
)
@pytest.mark.parametrize("bad", ["sha256:12", "SHA256:" + "AB" * 32, "ab" * 32, "sha512:" + "ab" * 64])
def test_a_malformed_engine_digest_is_a_one_line_error(
    cli: Cli, tiny_spec_file: Path, tmp_path: Path, command: tuple[str, ...], bad: str
) -> None:
    args = [str(tiny_spec_file) if a == "TINY" else a for a in command]
    out = tmp_path / "o"
    r = cli(*args, "--out", out, "--engine-digest", bad)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("Error: --engine-digest ") and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()


def test_an_engine_digest_without_an_engine_is_a_one_line_error(cli: Cli, tmp_path: Path) -> None:
    r = cli("dynamo", "deploy", DISAGG, "--out", tmp_path / "o", "--engine-digest", PIN, "--allow-unquantized")
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "--engine KEY" in r.output
    assert not (tmp_path / "o").exists()
    # `deploy --dry-run` of the Dynamo spec refuses it as the run does (it accepted it before)
    d = cli("deploy", DISAGG, "--dry-run", "--engine-digest", PIN)
    assert d.exit_code == 2 and "--engine KEY" in d.output, d.output


def _inits(out: Path) -> list[dict[str, Any]]:
    d = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return [c["podTemplate"]["spec"]["initContainers"][0] for c in d["spec"]["components"] if c["type"] != "frontend"]


@pytest.mark.slow
def test_the_dgd_pull_step_carries_the_given_digest(cli: Cli, tmp_path: Path) -> None:
    for verb, image in ((("dynamo", "deploy"), "--toolchain-image"), (("deploy",), "--image")):
        out = tmp_path / "-".join(verb)
        r = cli(*verb, DISAGG, "--out", out, "--engine", KEY, "--registry", "s3://models/llm", image, IMAGE,
                "--engine-digest", PIN)  # fmt: skip
        assert r.exit_code == 0, r.output
        assert not _unpinned(r.output)
        for init in _inits(out):
            assert init["args"][:4] == ["--registry", "s3://models/llm", "--digest", PIN]
    assert _inits(tmp_path / "dynamo-deploy") == _inits(tmp_path / "deploy")


@pytest.mark.slow
def test_the_dgd_pull_step_refuses_an_entry_replaced_after_the_deploy(s3_env: str, cli: Cli, tmp_path: Path) -> None:
    """The registry is readable here (moto S3): the digest is read at deploy time, and the init container's own
    command line, run here, restores that manifest and refuses (exit 6) the one a forced push put under the key
    since (measured before: the pull step took whatever the key named)."""
    import boto3

    registry = s3_bucket(s3_env, "dgd-pin")
    artifact = tmp_path / "artifact"
    (artifact / "hf").mkdir(parents=True)
    (artifact / "hf" / "config.json").write_text("{}")
    (artifact / "rank0.engine").write_bytes(os.urandom(4096))
    open_registry(registry).put(KEY, artifact)
    record = boto3.client("s3", endpoint_url=s3_env).get_object(Bucket="dgd-pin", Key=f"engines/manifests/{KEY}.json")
    deployed = "sha256:" + hashlib.sha256(record["Body"].read()).hexdigest()  # what `cache pull --digest` compares
    out = tmp_path / "dgd"
    r = cli("dynamo", "deploy", DISAGG, "--out", out, "--engine", KEY, "--registry", registry,
            "--toolchain-image", IMAGE, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["engine_digest"] == deployed and not _unpinned("\n".join(data["warnings"]))
    inits = _inits(out)
    assert inits and all(i["args"][i["args"].index("--digest") + 1] == deployed for i in inits)

    def pull(dest: Path) -> subprocess.CompletedProcess[str]:  # the init container's command, dest swapped
        cmd = [sys.executable if c == "python3" else c for c in (*inits[0]["command"], *inits[0]["args"])]
        cmd[cmd.index(f"/models/{KEY}")] = str(dest)
        env = os.environ | {"PYTHONPATH": str(REPO), "TOOLCHAIN_CACHE": str(tmp_path / "pod-cache")}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    ok = pull(tmp_path / "first")
    assert ok.returncode == 0, ok.stderr
    (artifact / "rank0.engine").write_bytes(os.urandom(4096))  # other content under the same key
    open_registry(registry).put(KEY, artifact, force=True)
    refused = pull(tmp_path / "after")
    assert refused.returncode == 6, refused.stderr
    assert "not the pinned" in refused.stderr and not (tmp_path / "after").exists()
