"""A stand-in behind a server that cannot say so (the Dynamo frontend before the mocker) is named by its record.

Measured before: a bench against `toolchain dynamo up` printed no "served by" line and its result had no
provenance.reference, so its TPOT read as a measurement of TensorRT-LLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.artifacts import standins

MOCKER = "the Dynamo mocker (stand-in for dynamo.trtllm)"


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))


def test_a_record_names_the_stand_in_while_it_serves_and_not_after() -> None:
    url = "http://127.0.0.1:41234"
    assert standins.lookup(url) is None
    with standins.serving(url, MOCKER):
        for same in (url, "127.0.0.1:41234", "http://localhost:41234/v1/chat/completions"):
            assert standins.lookup(same) == MOCKER, same
        assert standins.lookup("http://127.0.0.1:41235") is None  # another port
    assert standins.lookup(url) is None


def test_a_record_left_by_a_dead_process_is_ignored(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    url = "http://127.0.0.1:41236"
    with standins.serving(url, MOCKER):
        (rec,) = (tmp_path / "run" / "toolchain" / "stand-ins").glob("*.json")
        rec.write_text(json.dumps({"url": url, "reference": MOCKER, "pid": int(dead.stdout)}))  # as if kill -9
        assert standins.lookup(url) is None and not rec.exists()


@pytest.mark.parametrize("url", ["", "http://", "127.0.0.1:notaport", "http://[::1"])
def test_an_address_without_a_port_is_never_a_stand_in(url: str) -> None:
    with standins.serving(url, MOCKER):
        assert standins.lookup(url) is None


def test_bench_names_a_recorded_stand_in_in_its_provenance(tmp_path: Path) -> None:
    """The bench's own probe (bench.setup) reads the record: an OpenAI server here, recorded as the mocker."""
    from tests.bench.sse_server import sse_server_process
    from toolchain.bench import setup

    with sse_server_process(first_s=0.01, gap_s=0.002) as (url, _, _):
        assert setup._stand_in(url) is None
        with standins.serving(url, MOCKER):
            assert setup._stand_in(url) == MOCKER
    assert os.environ["XDG_RUNTIME_DIR"].startswith(str(tmp_path))
