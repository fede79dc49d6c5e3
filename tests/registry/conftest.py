"""Registry fixtures: the same contract suite runs over a local dir and a real moto S3 server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 server on 127.0.0.1, started once, bounded in time."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/", timeout=1)
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto server did not start; see {log}")
            time.sleep(0.1)
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def s3_env(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", moto_server)
    return moto_server


@pytest.fixture(params=["local", "s3"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "registry")
    request.getfixturevalue("s3_env")
    import boto3

    bucket = f"reg-{os.getpid()}-{abs(hash(tmp_path)) % 10**8}"
    boto3.client("s3", endpoint_url=os.environ["TOOLCHAIN_S3_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/engines"


@pytest.fixture
def engine_dir(tmp_path: Path) -> Path:
    d = tmp_path / "engine"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {"max_batch_size": 8}}')
    (d / "rank0.engine").write_bytes(os.urandom(300_000))
    (d / "sub" / "model.cache").write_bytes(b"timing" * 100)
    (d / "dup.engine").write_bytes((d / "rank0.engine").read_bytes())
    return d
