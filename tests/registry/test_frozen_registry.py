"""A frozen registry (the real docker-registry process stopped with SIGSTOP on 127.0.0.1: connections are still
accepted by the kernel, nothing is answered) is named within the stall deadline, not after retries of it:
`registry HOST stopped answering`, exit 75, with a ceiling many times the configured deadline. The registry
is continued (SIGCONT) in a finally, and is this module's own, so no other test sees it frozen."""

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
from tests.servers import RegistryServer, available, start_registry
from toolchain.errors import RegistryUnavailableError
from toolchain.registry import open_registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
DEADLINE_S = 1.0
CEILING_S = 30.0  # many times the deadline: a loaded 2-core machine cannot miss it, four retries of it would
KEY = "5" * 64


@pytest.fixture(scope="module")
def frozen_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    if not available():
        pytest.fail("docker-registry is not installed: run scripts/setup.sh (it installs Debian's docker-registry)")
    srv = start_registry(tmp_path_factory.mktemp("frozen"))
    yield srv
    os.kill(srv.proc.pid, signal.SIGCONT)
    srv.stop()


@pytest.fixture
def url(frozen_server: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("TOOLCHAIN_OCI_STALL_TIMEOUT", str(DEADLINE_S))
    return frozen_server.url(f"engines/f{os.getpid()}-{time.monotonic_ns()}")


@contextmanager
def frozen(srv: RegistryServer) -> Iterator[None]:
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)


def _engine(d: Path, size: int) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {}}')
    (d / "rank0.engine").write_bytes(os.urandom(size))
    return d


def _stopped_line(res: Any, host: str, *, waits: bool = False) -> str:
    prefix = f"waiting on {host}: " if waits else None
    return assert_stall_named(res, f"registry {host} stopped answering", "TOOLCHAIN_OCI_STALL_TIMEOUT", prefix)


@pytest.mark.parametrize("cmd", ["push", "pull"])
def test_a_frozen_registry_is_named_within_the_deadline(
    cmd: str, url: str, frozen_server: RegistryServer, tmp_path: Path, cli: Any
) -> None:
    src = _engine(tmp_path / "e", 100_000)
    if cmd == "pull":
        open_registry(url).put(KEY, src)
        args: list[Any] = ["cache", "pull", KEY, tmp_path / "out", "--registry", url]
    else:
        args = ["cache", "push", src, "--key", KEY, "--registry", url]
    with frozen(frozen_server):
        t0 = time.monotonic()
        res = cli(*args)
        took = time.monotonic() - t0
    _stopped_line(res, frozen_server.host, waits=True)  # and while it waited, progress said on what
    assert took < CEILING_S, f"{took:.1f} s"
    assert not (tmp_path / "out").exists()


def test_a_registry_frozen_mid_download_is_named_not_retried(
    url: str, frozen_server: RegistryServer, tmp_path: Path
) -> None:
    size = 48 * 2**20  # far more than the socket buffers hold: the stop lands mid-stream
    r = open_registry(url)
    r.put(KEY, _engine(tmp_path / "e", size))
    stopped: list[float] = []

    def progress(stage: str, done: float | None = None, total: float | None = None, **_: Any) -> None:
        if stage.startswith("pull") and done and not stopped:
            os.kill(frozen_server.proc.pid, signal.SIGSTOP)
            stopped.append(time.monotonic())

    r.progress = progress
    try:
        with pytest.raises(RegistryUnavailableError) as e:
            r.get(KEY, tmp_path / "out")
    finally:
        os.kill(frozen_server.proc.pid, signal.SIGCONT)
    assert stopped and time.monotonic() - stopped[0] < CEILING_S
    assert f"registry {frozen_server.host} stopped answering" in e.value.message, e.value.message
    assert not (tmp_path / "out").exists()


def test_the_default_stall_deadline_is_within_30_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.registry.connect import open_backend

    for var in ("TOOLCHAIN_OCI_STALL_TIMEOUT", "TOOLCHAIN_HTTP_READ_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    b: Any = open_backend("oci://127.0.0.1:9/engines/x")
    assert b.read_timeout <= 30.0 and b.client.timeout.read == b.read_timeout
