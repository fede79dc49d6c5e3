"""A stalled Hugging Face Hub (HF_ENDPOINT a server on 127.0.0.1 that accepts every connection and never answers)
is named within the stall deadline: `the Hugging Face Hub (HOST) stopped answering`, exit 75, with a ceiling many
times the configured deadline, not after huggingface_hub's retries of it (or never: its default client has no
timeout, so `quantize` of an hf:// model waited forever). The server and huggingface_hub's shared client are put
back in a finally."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assert_stall_named

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 1.0
CEILING_S = 15.0  # many times the deadline; the library's own retries of it take 60 s and more


@pytest.fixture
def silent_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """host:port of a Hub that accepts (the kernel's backlog) and never answers; the Hub's settings point at it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _http as hub_http

    from toolchain import hub

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    host = f"127.0.0.1:{srv.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", f"http://{host}")
    monkeypatch.setattr(constants, "ENDPOINT", f"http://{host}")  # the library read HF_ENDPOINT at import
    template = f"http://{host}/{{repo_id}}/resolve/{{revision}}/{{filename}}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the suite's own default is offline: this test asks the Hub
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("TOOLCHAIN_HF_STALL_TIMEOUT", str(DEADLINE_S))
    try:
        yield host
    finally:
        srv.close()
        hub_http.set_client_factory(hub_http.default_client_factory)
        hub._CONFIGURED.clear()
        hub._STOPPED.clear()


def _spec(tmp_path: Path) -> Path:
    """A shipped spec whose model is on the Hub, without model.architecture: its config.json must be fetched."""
    text = Path("engine_specs/llama-3.1-8b-fp8.yaml").read_text()
    text = text.replace("  architecture: llama-3.1-8b\n", "")
    text = text.replace("hf://meta-llama/Llama-3.1-8B-Instruct@main", "hf://org/stalled@main")
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("cmd", ["plan", "quantize"])
def test_a_stalled_hub_is_named_within_the_deadline(cmd: str, silent_hub: str, tmp_path: Path, cli: Any) -> None:
    args: list[Any] = (
        ["plan", _spec(tmp_path), "--estimator", "floor"] if cmd == "plan" else ["quantize", _spec(tmp_path)]
    )
    t0 = time.monotonic()
    res = cli(*args)
    took = time.monotonic() - t0
    stopped = f"the Hugging Face Hub ({silent_hub}) stopped answering (nothing for 1 s)"
    # a download (quantize): while it waited, progress said on what
    waits = f"waiting on the Hub ({silent_hub}): " if cmd == "quantize" else None
    assert_stall_named(res, stopped, "TOOLCHAIN_HF_STALL_TIMEOUT", waits)
    assert took < CEILING_S, f"{took:.1f} s"


def test_the_default_hub_stall_deadline_is_within_30_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain import hub

    for var in ("TOOLCHAIN_HF_STALL_TIMEOUT", "TOOLCHAIN_HTTP_READ_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    _, stall, setting = hub.deadlines()
    assert stall <= 30.0 and setting == "TOOLCHAIN_HF_STALL_TIMEOUT"


def test_a_bad_hub_stall_setting_is_a_one_line_user_error(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_HF_STALL_TIMEOUT", "soon")
    res = cli("cache", "ls", "--registry", "hf://org/engines")
    assert res.exit_code == 2 and "TOOLCHAIN_HF_STALL_TIMEOUT='soon'" in res.output, res.output
