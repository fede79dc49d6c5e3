"""Registry fixtures: the same contract suite runs over a local dir and a real moto S3 server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.matrix_bench import start_moto, stop


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 server on 127.0.0.1, started once, bounded in time (the benchmarks' launcher)."""
    try:
        proc, url = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    except RuntimeError as e:
        pytest.fail(str(e))
    yield url
    stop(proc)


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
