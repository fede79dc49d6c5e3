"""Every wait on a registry has a deadline: servers on 127.0.0.1 that accept and never answer, or send
headers and stall, end the command with one line naming the stall (bounded: a short read timeout, retries)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["silent", "headers-then-stall"])
def stalled(request: pytest.FixtureRequest) -> Iterator[str]:
    """host:port of a server that holds every connection open and sends nothing (or only headers)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)
            if request.param == "headers-then-stall":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["ls", "pull"])
def test_a_stalled_registry_ends_with_one_line(
    cmd: str, stalled: str, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "0.3")
    url = f"oci://{stalled}/engines/x"
    args = (
        ["cache", "ls", "--registry", url]
        if cmd == "ls"
        else ["cache", "pull", "a" * 64, tmp_path / "o", "--registry", url]
    )
    res = cli(*args)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == 75 and len(lines) == 1 and "Traceback" not in res.output, res.output  # transient
    assert "stopped answering" in lines[0] and "TOOLCHAIN_HTTP_READ_TIMEOUT" in lines[0]
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


def test_a_bad_timeout_setting_is_a_one_line_user_error(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "soon")
    res = cli("cache", "ls", "--registry", "oci://127.0.0.1:9/engines/x")
    assert res.exit_code == 2 and "TOOLCHAIN_HTTP_READ_TIMEOUT='soon'" in res.output


@pytest.mark.slow
def test_a_stalled_s3_endpoint_ends_with_one_line(stalled: str, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 backend's reads have the same deadline (botocore's read_timeout, its bounded retries)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", f"http://{stalled}")
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "0.3")
    res = cli("cache", "ls", "--registry", "s3://bucket/engines")
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == 75 and len(lines) == 1 and "Traceback" not in res.output, res.output  # transient
    assert "stopped answering" in lines[0] and "TOOLCHAIN_HTTP_READ_TIMEOUT" in lines[0], lines[0]


def test_the_s3_client_gets_the_configured_deadlines(
    s3_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    from toolchain.registry.backends import S3Backend

    monkeypatch.setenv("TOOLCHAIN_HTTP_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "7")
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="deadlines")
    b = S3Backend("deadlines", "p")
    cfg = b.s3.meta.config
    assert (cfg.connect_timeout, cfg.read_timeout) == (2.5, 7.0)
    assert cfg.retries == {"total_max_attempts": 5, "mode": "standard"}
    b.write_bytes("x", b"hello")  # the client so configured works against moto
    assert b.read_bytes("x") == b"hello"


def test_a_bad_timeout_setting_is_a_user_error_for_s3_and_hf(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_HTTP_CONNECT_TIMEOUT", "-1")
    for url in ("s3://bucket/engines", "hf://org/engines"):
        res = cli("cache", "ls", "--registry", url)
        assert res.exit_code == 2 and "TOOLCHAIN_HTTP_CONNECT_TIMEOUT='-1'" in res.output, res.output


@pytest.fixture
def hub_factory() -> Iterator[None]:
    """Put huggingface_hub's default HTTP client back after a test changed it (the hook is process-wide)."""
    from huggingface_hub.utils import _http as hub_http

    from toolchain import hub

    yield
    hub_http.set_client_factory(hub_http.default_client_factory)
    hub._CONFIGURED.clear()


def test_the_hub_client_gets_the_configured_deadlines(hub_factory: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    from huggingface_hub.utils._http import get_session

    from toolchain.registry.backends import HFBackend

    monkeypatch.setenv("TOOLCHAIN_HTTP_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "7")
    HFBackend("org/engines")
    assert get_session().timeout == httpx.Timeout(7.0, connect=2.5)
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "9")
    HFBackend("org/engines")  # a new setting, a new client
    assert get_session().timeout == httpx.Timeout(9.0, connect=2.5)
    # and the library's own request hooks stay, with toolchain/http.py's debug log beside them
    hooks = get_session().event_hooks
    assert len(hooks["request"]) >= 2 and any("toolchain.http" in f.__module__ for f in hooks["response"])


def test_hub_downloads_ask_with_the_read_deadline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from toolchain.registry.backends import HFBackend

    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "7")
    asked: list[dict[str, Any]] = []
    src = tmp_path / "f"
    src.write_bytes(b"blob")

    class Api:  # a stand-in for HfApi: records how it was asked
        def hf_hub_download(self, repo_id: str, path: str, **kw: Any) -> str:
            asked.append(kw)
            return str(src)

    b = HFBackend("org/engines", api=Api())
    assert b.read_bytes("manifests/x.json") == b"blob"
    b.get_file("blobs/y", tmp_path / "g")
    # a manifest is read from the Hub every time (force_download: never a superseded cached copy); a blob may not
    assert asked == [{"etag_timeout": 7.0, "force_download": True}, {"etag_timeout": 7.0}]
