"""A registry that refuses anonymous access, met with only half of the TOOLCHAIN_OCI_* credential pair set:
one line naming the variable that is missing (not "no credentials were found"), exit 2, against a small
HTTP server on 127.0.0.1 (tests/registry/oci_proxy.py) that answers 401 with a Basic or a Bearer challenge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.registry.oci_proxy import ProxyState, proxy

pytestmark = pytest.mark.timeout(120)

KEY = "d" * 64


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def _state(challenge: str) -> ProxyState:
    # basic: every request is a 401 with a Basic challenge; bearer: a token gate whose /token refuses anonymity
    return ProxyState(status=401) if challenge == "basic" else ProxyState(users={"bob": "hunter2"})


@pytest.mark.parametrize("challenge", ["basic", "bearer"])
@pytest.mark.parametrize(
    ("have", "missing"),
    [("TOOLCHAIN_OCI_USERNAME", "TOOLCHAIN_OCI_PASSWORD"), ("TOOLCHAIN_OCI_PASSWORD", "TOOLCHAIN_OCI_USERNAME")],
)
def test_half_a_credential_pair_names_the_missing_variable(
    challenge: str, have: str, missing: str, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # no Docker login either
    monkeypatch.delenv(missing, raising=False)
    monkeypatch.setenv(have, "bob" if have.endswith("USERNAME") else "hunter2-Secret")
    with proxy(_state(challenge)) as host:
        for args in (("cache", "ls"), ("cache", "pull", KEY, tmp_path / "o")):
            r = cli(*args, "--registry", f"oci://{host}/engines/x")
            assert r.exit_code == 2, r.output
            line = _error_line(r.output)
            assert f"{have} is set but {missing} is not" in line and f"set {missing}" in line, line
            assert "no credentials were found" not in line and host in line
            assert "hunter2-Secret" not in r.output


@pytest.mark.parametrize("challenge", ["basic", "bearer"])
def test_no_credentials_at_all_says_so_and_how_to_log_in(
    challenge: str, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("TOOLCHAIN_OCI_USERNAME", raising=False)
    monkeypatch.delenv("TOOLCHAIN_OCI_PASSWORD", raising=False)
    with proxy(_state(challenge)) as host:
        r = cli("cache", "ls", "--registry", f"oci://{host}/engines/x")
    assert r.exit_code == 2, r.output
    line = _error_line(r.output)
    assert "refused anonymous access (401)" in line and "docker login" in line and "TOOLCHAIN_OCI_PASSWORD" in line
