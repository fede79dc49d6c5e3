"""Issue 47 (C): a failure a retry may fix (a service unreachable, timed out, answering 429/5xx) exits 75
(EX_TEMPFAIL) in every command, and the build farm retries exactly that: the Kubernetes Jobs' podFailurePolicy
counts it (never FailIndex), Argo's retryStrategy retries it. The Job's own command, read from the rendered
manifest, is run here with the Hugging Face Hub unreachable (HF_ENDPOINT at a closed 127.0.0.1 port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from toolchain import http
from toolchain.errors import (
    EX_TEMPFAIL,
    HTTPUnavailableError,
    RegistryAuthError,
    RegistryPlainHTTPError,
    RegistryUnavailableError,
    SpecError,
)

FAKES = REPO / "tests" / "fakes"
IMAGE = "registry.example.com/toolchain-build:1.1.0"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: a connection is refused


def test_the_error_classes_split_transient_from_permanent() -> None:
    assert EX_TEMPFAIL == 75
    assert RegistryUnavailableError("x").exit_code == 75 and RegistryUnavailableError("x").transient
    assert HTTPUnavailableError("x").exit_code == 75
    for permanent in (RegistryPlainHTTPError("x"), RegistryAuthError("x"), SpecError("x")):
        assert permanent.exit_code == 2 and not permanent.transient


def test_transient_reads_the_cause_chain() -> None:
    import httpx

    assert http.transient(httpx.ConnectError("refused"))
    assert http.transient(ConnectionRefusedError())
    assert not http.transient(httpx.UnsupportedProtocol("ftp"))
    assert not http.transient(ValueError("bad"))
    try:  # huggingface_hub's way: its own error raised from the connection error it met
        try:
            raise httpx.ConnectTimeout("slow")
        except httpx.ConnectTimeout as e:
            raise RuntimeError("cannot find the requested files in the local cache") from e
    except RuntimeError as wrapped:
        assert http.transient(wrapped)

    class Answer:
        def __init__(self, code: int) -> None:
            self.status_code = code

    class StatusError(Exception):
        def __init__(self, code: int) -> None:
            self.response = Answer(code)

    assert [http.transient(StatusError(c)) for c in (429, 500, 503, 401, 403, 404)] == [True] * 3 + [False] * 3


class _Failing(BaseHTTPRequestHandler):
    status = 503

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(status: int) -> str:
        handler = type("H", (_Failing,), {"status": status})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_registry_unreachable_or_failing_exits_75_and_a_missing_one_does_not(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, answering: Any
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    r = cli("cache", "ls", "--registry", f"oci://127.0.0.1:{_closed_port()}/engines/c", "--json")
    assert r.exit_code == 75, r.output
    assert json.loads(r.stdout)["exit"] == 75 and r.stderr.startswith("Error: cannot reach registry")

    from toolchain.http import Backoff

    monkeypatch.setattr("toolchain.registry.oci.transport.POLICY", Backoff(attempts=2, base=0.01))
    r = cli("cache", "ls", "--registry", f"oci://{answering(503)}/engines/c")
    assert r.exit_code == 75 and "503" in r.stderr, r.output
    r = cli("cache", "ls", "--registry", f"oci://{answering(404)}/engines/c")
    assert r.exit_code not in (0, 75) and "404" in r.stderr, r.output  # a wrong URL: no retry fixes it


def test_an_untranslated_connection_error_exits_75(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr("toolchain.registry.open_registry", refuse)
    r = cli("cache", "ls", "--registry", "/tmp/x")
    assert r.exit_code == 75 and r.stderr.startswith("Error: a network request failed (connect)"), r.output
    assert "Traceback" not in r.output


# --- the build farm -----------------------------------------------------------------------------------------------


def _hub_spec(dest: Path) -> Path:
    """One unquantized cell of a model on the Hub (its architecture named, so its key needs no network)."""
    d = yaml.safe_load((SPECS / "llama-3.1-8b-fp8.yaml").read_text())
    d["model"]["source"] = "hf://example-org/tiny-llama@0123456789abcdef0123456789abcdef01234567"
    d["quantization"] = {"weights": "bf16"}
    d["matrix"] = {"gpu": ["H100-SXM"], "max_batch_size": [64], "max_seq_len": [4096]}
    dest.write_text(yaml.safe_dump(d))
    return dest


@pytest.fixture
def rendered(cli: Cli, tmp_path: Path) -> tuple[Path, str]:
    registry = str(tmp_path / "registry")
    spec = _hub_spec(tmp_path / "hub.yaml")
    for fmt in ("kubernetes", "argo"):
        r = cli("matrix", spec, "--format", fmt, "--out", tmp_path / fmt, "--image", IMAGE, "--registry", registry)
        assert r.exit_code == 0, r.output
    return tmp_path, registry


def test_the_jobs_retry_exit_75_and_fail_fast_on_user_errors(rendered: tuple[Path, str]) -> None:
    root, _ = rendered
    (job_file,) = (root / "kubernetes").rglob("build-job.yaml")
    rules = yaml.safe_load(job_file.read_text())["spec"]["podFailurePolicy"]["rules"]
    by_action = {r["action"]: r for r in rules}
    assert by_action["Count"]["onExitCodes"]["values"] == [75]
    assert 75 not in by_action["FailIndex"]["onExitCodes"]["values"]
    assert by_action["FailIndex"]["onExitCodes"]["values"] == [2, 3, 4]

    (wf_file,) = (root / "argo").rglob("workflow.yaml")
    wf = yaml.safe_load(wf_file.read_text())
    builds = [t for t in wf["spec"]["templates"] if "retryStrategy" in t and "expression" in t["retryStrategy"]]
    assert builds
    for t in builds:
        rs = t["retryStrategy"]
        assert rs["retryPolicy"] == "Always" and rs["expression"].startswith("asInt(lastRetry.exitCode) in [75] ||")
        assert _argo_retries(rs["expression"], 75) and not _argo_retries(rs["expression"], 2)
        assert _argo_retries(rs["expression"], 1) and not _argo_retries(rs["expression"], 4)


def _argo_retries(expression: str, code: int) -> bool:
    """Argo's expression (expr-lang) evaluated for ``lastRetry.exitCode == code``: its only forms here are
    ``asInt(lastRetry.exitCode) in [..]``, ``!``, ``||``, parentheses."""
    py = expression.replace("asInt(lastRetry.exitCode)", str(code)).replace("||", " or ").replace("!", " not ")
    assert set(py) <= set("0123456789[], ()ornotin "), py
    return bool(eval(py))  # digits, brackets and the three words checked above


def test_the_build_index_with_the_hub_unreachable_exits_75(rendered: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = rendered
    (job_file,) = (root / "kubernetes").rglob("build-job.yaml")
    (cells_file,) = (root / "kubernetes").rglob("cells.yaml")
    pod = yaml.safe_load(job_file.read_text())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "cells")
    cells = tmp_path / "mnt"  # the ConfigMap as the kubelet mounts it: one file per key
    cells.mkdir()
    for k, v in yaml.safe_load(cells_file.read_text())["data"].items():
        (cells / k).write_text(v)

    cmd = [str(cells) + a[len(mount) :] if a.startswith(mount) else a for a in container["command"]]
    assert cmd[:3] == ["python3", "-m", "toolchain.cli.main"] and "job" in cmd and "build" in cmd
    cmd[0] = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update({e["name"]: e["value"] for e in container["env"] if e["name"] not in ("HOME", "TOOLCHAIN_CACHE")})
    env.update(
        {
            "JOB_COMPLETION_INDEX": "0",  # as Kubernetes sets it
            "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",  # the Hub unreachable
            "HOME": str(tmp_path / "home"),
            "TOOLCHAIN_CACHE": str(tmp_path / "cache"),
            "HF_HOME": str(tmp_path / "hf"),
            # the build image, simulated: TensorRT-LLM 1.1.0's packages and the stand-in trtllm-build
            "PYTHONPATH": f"{REPO}{os.pathsep}{FAKES / 'py'}",
            "PATH": f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "TRTLLM_ROOT": str(FAKES / "trtllm_root"),
        }
    )
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 75, p.stdout + p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("Error: ")]
    assert "Hugging Face Hub" in line and "ConnectError" not in line and "Traceback" not in p.stderr


@pytest.mark.parametrize("protocol", ["openai", "triton"])
def test_bench_against_a_server_that_is_not_there_exits_75(cli: Cli, protocol: str, tmp_path: Path) -> None:
    from toolchain.bench.standin import write_tokenizer

    tok = write_tokenizer(tmp_path / "tok")
    port = _closed_port()
    url = f"http://127.0.0.1:{port}" if protocol == "openai" else f"127.0.0.1:{port}"
    r = cli(
        "bench", "--url", url, "--protocol", protocol, "--model", "m", "--tokenizer", tok, "--input-tokens", "4",
        "--output-tokens", "4", "--warmup", "0", "--requests", "2", "--json",
    )  # fmt: skip
    assert r.exit_code == 75, r.output
    assert json.loads(r.stdout)["exit"] == 75 and "cannot reach" in r.stderr


@pytest.mark.parametrize("args", [["cache", "ls"], ["cache", "pull", "abcdef12", "OUT"]])
def test_a_hub_registry_that_is_unreachable_exits_75(args: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update({"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "PYTHONPATH": str(REPO)})
    cmd = [sys.executable, "-m", "toolchain.cli.main", *[str(tmp_path / "o") if a == "OUT" else a for a in args]]
    p = subprocess.run([*cmd, "--registry", "hf://org/engines"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 75, p.stderr
    assert p.stderr.startswith("Error: ") and "Traceback" not in p.stderr and not (tmp_path / "o").exists()
