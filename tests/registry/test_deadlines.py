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
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert "stopped answering" in lines[0] and "TOOLCHAIN_HTTP_READ_TIMEOUT" in lines[0]
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


def test_a_bad_timeout_setting_is_a_one_line_user_error(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_HTTP_READ_TIMEOUT", "soon")
    res = cli("cache", "ls", "--registry", "oci://127.0.0.1:9/engines/x")
    assert res.exit_code == 2 and "TOOLCHAIN_HTTP_READ_TIMEOUT='soon'" in res.output
