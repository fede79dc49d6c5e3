"""Registry fixtures: the same contract suite runs over a local dir, a real moto S3 server and a real OCI
registry (CNCF distribution, Debian's docker-registry) on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import RegistryServer, available, start_moto, start_registry, stop


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


@pytest.fixture(scope="session")
def oci_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A real CNCF distribution registry on 127.0.0.1 (plain HTTP, storage in tmp), started once per session."""
    if not available():
        pytest.fail("docker-registry is not installed: run scripts/setup.sh (it installs Debian's docker-registry)")
    try:
        srv = start_registry(tmp_path_factory.mktemp("oci"))
    except RuntimeError as e:
        pytest.fail(str(e))
    yield srv
    srv.stop()


_repos = iter(range(10**9))


@pytest.fixture
def oci_env(oci_server: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> RegistryServer:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    for var in ("TOOLCHAIN_OCI_USERNAME", "TOOLCHAIN_OCI_PASSWORD", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return oci_server


@pytest.fixture
def oci_url(oci_env: RegistryServer) -> str:
    """A fresh repository on the session's registry."""
    return oci_env.url(f"engines/t{os.getpid()}-{next(_repos)}")


@pytest.fixture(params=["local", "s3", "oci"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "registry")
    if request.param == "oci":
        return str(request.getfixturevalue("oci_url"))
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
