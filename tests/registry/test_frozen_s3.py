"""A frozen S3 endpoint (a real moto server stopped with SIGSTOP on 127.0.0.1: the kernel still accepts
connections, nothing is answered) is named within the stall deadline, not after botocore's retries of it:
`S3 endpoint HOST stopped answering`, exit 75, with a ceiling many times the configured deadline. The server is
this module's own and is continued (SIGCONT) in a finally, so no other test sees it frozen."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assert_stall_named
from tests.servers import start_moto, stop
from toolchain.registry import open_registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
DEADLINE_S = 1.0
CEILING_S = 15.0  # many times the deadline: a loaded 2-core machine cannot miss it, five tries of it would
KEY = "5" * 64


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    try:
        proc, url = start_moto(tmp_path_factory.mktemp("frozen-s3") / "moto.log")
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield proc.pid, url
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop(proc)


@pytest.fixture
def url(moto: tuple[int, str], monkeypatch: pytest.MonkeyPatch) -> str:
    import boto3

    _, endpoint = moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("TOOLCHAIN_S3_STALL_TIMEOUT", str(DEADLINE_S))
    bucket = f"frozen-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/engines"


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _engine(d: Path, size: int) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {}}')
    (d / "rank0.engine").write_bytes(os.urandom(size))
    return d


@pytest.mark.parametrize("cmd", ["push", "pull"])
def test_a_frozen_s3_endpoint_is_named_within_the_deadline(
    cmd: str, url: str, moto: tuple[int, str], tmp_path: Path, cli: Any
) -> None:
    pid, endpoint = moto
    host = endpoint.removeprefix("http://")
    src = _engine(tmp_path / "e", 100_000)
    if cmd == "pull":
        open_registry(url).put(KEY, src)
        args: list[Any] = ["cache", "pull", KEY, tmp_path / "out", "--registry", url]
    else:
        args = ["cache", "push", src, "--key", KEY, "--registry", url]
    with frozen(pid):
        t0 = time.monotonic()
        res = cli(*args)
        took = time.monotonic() - t0
    # and while it waited, progress said on what
    assert_stall_named(
        res, f"S3 endpoint {host} stopped answering", "TOOLCHAIN_S3_STALL_TIMEOUT", f"waiting on {host}: "
    )
    assert took < CEILING_S, f"{took:.1f} s"
    assert not (tmp_path / "out").exists()


def test_an_s3_endpoint_frozen_mid_download_is_named_not_retried(
    url: str, moto: tuple[int, str], tmp_path: Path
) -> None:
    """A body read that times out ends the download: s3transfer does not send the GET again to wait anew."""
    pid, endpoint = moto
    size = 48 * 2**20  # far more than the socket buffers hold: the stop lands mid-stream
    r = open_registry(url)
    r.put(KEY, _engine(tmp_path / "e", size))
    gets: list[str] = []
    r.backend.s3.meta.events.register("before-send.s3.GetObject", lambda request, **_: gets.append(request.url))  # type: ignore[attr-defined]
    stopped: list[float] = []

    def progress(stage: str, done: float | None = None, total: float | None = None, **_: Any) -> None:
        if stage.startswith("pull") and done and done > 2**20 and not stopped:  # inside the big object's body
            os.kill(pid, signal.SIGSTOP)
            stopped.append(time.monotonic())

    r.progress = progress
    from toolchain.errors import RegistryUnavailableError

    try:
        with pytest.raises(RegistryUnavailableError) as e:
            r.get(KEY, tmp_path / "out")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert stopped and time.monotonic() - stopped[0] < CEILING_S
    assert f"S3 endpoint {endpoint.removeprefix('http://')} stopped answering" in e.value.message, e.value.message
    assert gets and len(gets) == len(set(gets)), gets  # the stalled object was asked for once, not again
    assert not (tmp_path / "out").exists()


def test_the_default_s3_stall_deadline_is_within_30_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.registry.backends import S3Backend

    for var in ("TOOLCHAIN_S3_STALL_TIMEOUT", "TOOLCHAIN_HTTP_READ_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    b = S3Backend("bucket", "engines", endpoint_url="http://127.0.0.1:9")
    assert b.read_timeout <= 30.0 and b.s3.meta.config.read_timeout == b.read_timeout
    assert b.deadline_setting == "TOOLCHAIN_S3_STALL_TIMEOUT"
