"""`toolchain deploy --public-key`: the image requires a signed engine (docs/signing.md).

The build context carries the public key, the Dockerfile copies it and sets TOOLCHAIN_VERIFY_KEY (hadolint
passes it), and the entrypoint, run for real against a moto S3 registry on 127.0.0.1, refuses an unsigned
engine before serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.helpers import deploy_reference, run_entrypoint, s3_bucket, stop_entrypoint
from tests.validators import hadolint
from toolchain.digest import dir_digest
from toolchain.registry import open_registry
from toolchain.triton.server import free_port


def _pub(tmp_path: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    pub = tmp_path / "cosign.pub"
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pub


@pytest.mark.slow
def test_deploy_with_a_public_key_builds_an_image_that_requires_signatures(
    tiny_spec_file: Path, tmp_path: Path, cli: Any
) -> None:
    pub = _pub(tmp_path)
    out = tmp_path / "d"
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", out, "--public-key", pub)
    assert r.exit_code == 0, r.output
    assert (out / "image" / "cosign.pub").read_bytes() == pub.read_bytes()
    df = (out / "image" / "Dockerfile").read_text()
    assert "COPY cosign.pub /opt/toolchain/cosign.pub" in df
    assert "TOOLCHAIN_VERIFY_KEY=/opt/toolchain/cosign.pub" in df and "src[s3,hf,sign]" in df
    res = hadolint(out / "image" / "Dockerfile")
    assert res.returncode == 0, res.stdout + res.stderr
    plain = tmp_path / "plain"
    assert cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", plain).exit_code == 0
    assert "TOOLCHAIN_VERIFY_KEY" not in (plain / "image" / "Dockerfile").read_text()
    assert not (plain / "image" / "cosign.pub").exists()


def test_deploy_refuses_a_key_that_is_not_a_public_key(tiny_spec_file: Path, tmp_path: Path, cli: Any) -> None:
    bad = tmp_path / "k.pem"
    bad.write_text("not a key\n")
    r = cli("deploy", tiny_spec_file, "--registry", "s3://b/p", "--out", tmp_path / "d", "--public-key", bad)
    assert r.exit_code == 2, r.output
    assert [ln for ln in r.output.splitlines() if ln.startswith("Error: ")] and "Traceback" not in r.output
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
@pytest.mark.server
def test_the_entrypoint_refuses_an_unsigned_engine(
    s3_env: str, tiny_spec_file: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    key = dir_digest(tiny_checkpoint).split(":", 1)[1]
    registry = s3_bucket(s3_env, "unsigned")
    open_registry(registry).put(key, tiny_checkpoint, kind="checkpoint")
    pub = _pub(tmp_path)
    out = deploy_reference(tiny_spec_file, tmp_path, registry, key, public_key_pem=pub.read_bytes())
    ports = {"SERVE_HOST": "127.0.0.1", "HTTP_PORT": str(free_port()), "GRPC_PORT": str(free_port())}
    # what the Dockerfile's ENV sets in the image (the image root is laid out under out/image here)
    env = {**ports, "METRICS_PORT": str(free_port()), "TOOLCHAIN_VERIFY_KEY": str(out / "image" / "cosign.pub")}
    log = tmp_path / "entrypoint.log"
    proc = run_entrypoint(out, env, log)
    try:
        rc = proc.wait(120)
    finally:
        stop_entrypoint(proc)
    text = log.read_text()
    assert rc != 0, text
    assert "carries no signature" in text and "not serving" in text, text
    assert not (tmp_path / "engines" / key / "config.json").exists()
