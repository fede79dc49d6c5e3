"""Issue 47 (A): no password, token or signature reaches an error line, a log line, a progress line or a file the
toolchain writes (docs/http.md, "Never logged"); one helper, toolchain.redact, does it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Cli
from toolchain import redact

SECRETS = ("Pz9secret", "hunter2", "SIGSECRET", "TOKSECRET", "BEARERSECRET", "QkFTSUNTRUNSRVQ")


def _clean(text: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s!r} leaked into: {text}"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("oci://alice:Pz9secret@127.0.0.1:5000/engines/c", "oci://***@127.0.0.1:5000/engines/c"),
        ("see https://bob:hunter2@host/x?a=1", "see https://***@host/x?a=1"),
        ("'alice:Pz9secret@127.0.0.1:5000' is not a host", "'***@127.0.0.1:5000' is not a host"),
        (
            "GET https://s3.example/b/o?X-Amz-Signature=SIGSECRET&X-Amz-Credential=AKIA&part=2 -> 403",
            "GET https://s3.example/b/o?X-Amz-Signature=***&X-Amz-Credential=***&part=2 -> 403",
        ),
        ("http://h/v2/token?access_token=TOKSECRET&scope=x", "http://h/v2/token?access_token=***&scope=x"),
        ("blob at http://h/b?sig=SIGSECRET&se=2030", "blob at http://h/b?sig=***&se=2030"),
        ("upload http://h/u/1?_state=TOKSECRET&digest=sha256:9", "upload http://h/u/1?_state=***&digest=sha256:9"),
        ("Authorization: Bearer BEARERSECRET.x.y", "Authorization: Bearer ***"),
        ("{'Authorization': 'Basic QkFTSUNTRUNSRVQ='}", "{'Authorization': 'Basic ***'}"),
        ("sent Bearer BEARERSECRET0123456789", "sent Bearer ***"),
        ("token=TOKSECRET password=hunter2", "token=*** password=***"),
        ('{"password": "hunter2", "user": "alice"}', '{"password": "***", "user": "alice"}'),
        ("password: hunter2", "password: ***"),
    ],
)
def test_text_hides_every_secret_form(raw: str, shown: str) -> None:
    assert redact.text(raw) == shown
    assert redact.text(shown) == shown  # idempotent: a redacted line stays as it is


@pytest.mark.parametrize(
    "plain",
    [
        "use a registry with Basic or Bearer token auth",
        "nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3@sha256:0123abcd",
        "git@github.com:org/repo.git",
        "no entry 3f2a9c in registry oci://127.0.0.1:5000/engines/c",
        "the signature: missing; key=value pairs and engine_key=abc stay",
        "http://h/v2/x/tags/list?n=100&last=abc",
        "drop the 'user:password@' part and give them in a Secret: --registry-secret NAME",
        "kv_bytes_per_token=4096 unk_token=<unk>",
    ],
)
def test_text_leaves_what_is_no_secret(plain: str) -> None:
    assert redact.text(plain) == plain


def test_argv_hides_secret_flags_and_credentials_in_arguments() -> None:
    assert redact.argv(["x", "--password", "hunter2", "--api-key=TOKSECRET", "--url", "http://a:Pz9secret@h/v1"]) == [
        "x",
        "--password",
        "***",
        "--api-key=***",
        "--url",
        "http://***@h/v1",
    ]


# --- through the real CLI -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("json_out", [False, True])
def test_cache_ls_with_credentials_in_the_registry_url_never_prints_them(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, debug: bool, json_out: bool
) -> None:
    if debug:
        monkeypatch.setenv("TOOLCHAIN_DEBUG", "1")
    url = "oci://alice:Pz9secret@127.0.0.1:5999/engines/c"
    r = cli("cache", "ls", "--registry", url, *(["--json"] if json_out else []))
    assert r.exit_code == 2, r.output
    _clean(r.output)
    _clean(r.stderr)
    assert "Error: 'oci://127.0.0.1:5999/engines/c' carries credentials in the URL" in r.stderr
    assert "docker login 127.0.0.1:5999" in r.stderr
    if json_out:
        doc = json.loads(r.stdout)
        assert doc["exit"] == 2 and "carries credentials" in doc["error"]


class _Leaky(BaseHTTPRequestHandler):
    """A registry whose every answer quotes secrets back (a presigned URL, a token, a header) in its error body."""

    def _answer(self) -> None:
        body = json.dumps(
            {
                "errors": [
                    {
                        "code": "DENIED",
                        "message": "upstream https://s3.example/o?X-Amz-Signature=SIGSECRET&token=TOKSECRET "
                        "refused Authorization: Bearer BEARERSECRET.abc password=hunter2",
                    }
                ]
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def leaky_registry() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Leaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("debug", [False, True])
def test_a_registry_error_quoting_secrets_is_shown_without_them(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, leaky_registry: str, debug: bool
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("TOOLCHAIN_OCI_USERNAME", "alice")
    monkeypatch.setenv("TOOLCHAIN_OCI_PASSWORD", "hunter2")
    if debug:
        monkeypatch.setenv("TOOLCHAIN_DEBUG", "1")
    r = cli("cache", "ls", "--registry", f"oci://{leaky_registry}/engines/c", "--json")
    assert r.exit_code != 0
    assert "Error: " in r.stderr and "X-Amz-Signature=***" in r.stderr  # the message is there, its secrets not
    _clean(r.stdout)
    _clean(r.stderr)


def test_the_installed_command_hides_credentials_in_its_error_and_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOOLCHAIN_DEBUG": "1", "HOME": str(tmp_path)}
    env["TOOLCHAIN_CACHE"] = str(tmp_path / "cache")
    url = "oci://alice:Pz9secret@127.0.0.1:5999/engines/c"
    p = subprocess.run(
        [sys.executable, "-m", "toolchain.cli.main", "cache", "ls", "--registry", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" in p.stderr  # TOOLCHAIN_DEBUG=1 shows it ...
    _clean(p.stdout)
    _clean(p.stderr)  # ... and the URL in it without the password


# --- logs, wrapped servers' logs, bench provenance -------------------------------------------------------------------


def test_the_debug_log_handler_hides_secrets_in_any_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from toolchain import logs

    monkeypatch.setenv("TOOLCHAIN_DEBUG", "1")
    try:
        assert logs.configure() is True
        logging.getLogger("toolchain.registry").debug("fetched %s with %s", "http://a:Pz9secret@h/x", "token=TOKSECRET")
    finally:
        logs.configure(False)
    err = capsys.readouterr().err
    assert "fetched http://***@h/x with token=***" in err
    _clean(err)


def test_a_wrapped_servers_log_and_its_tail_hide_secrets(tmp_path: Path) -> None:
    from toolchain import proc

    log = tmp_path / "server.log"
    p = proc.spawn_guarded(
        [sys.executable, "-c", "print('GET /v1?api_key=TOKSECRET')", "--token", "TOKSECRET"], log, dict(os.environ)
    )
    p.wait(60)
    head = log.read_text().splitlines()[0]
    assert head.startswith("$ ") and "--token '***'" in head
    _clean(head)
    _clean(proc.tail(log))


# A fake server: what real ones print (a URL with credentials, a presigned query, a request's header) on both
# streams, a line split across two writes, and a last line without a newline.
FAKE_SERVER = """
import sys, time
print("loading from https://alice:Pz9secret@hub.example/m?token=TOKSECRET&rev=main", flush=True)
print("Authorization: Bearer BEARERSECRET.abc.def", file=sys.stderr, flush=True)
sys.stdout.write("GET /v1?sig=SIG"); sys.stdout.flush(); time.sleep(0.05)
sys.stdout.write("SECRET&n=1 200\\n"); sys.stdout.flush()
sys.stdout.write("password=hunter2 done")
"""


def _fake_server(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return [sys.executable, str(script), "--api-key", "TOKSECRET", "https://bob:hunter2@h/x"]


def _check_server_log(text: str) -> None:
    _clean(text)
    lines = text.splitlines()
    assert lines[0].startswith("$ ") and "--api-key '***'" in lines[0] and "https://***@h/x" in lines[0]
    assert "loading from https://***@hub.example/m?token=***&rev=main" in lines
    assert "Authorization: Bearer ***" in lines
    assert "GET /v1?sig=***&n=1 200" in lines
    assert lines[-1] == "password=*** done"


def test_a_wrapped_servers_own_output_reaches_its_log_redacted(tmp_path: Path) -> None:
    from toolchain import proc

    log = tmp_path / "server.log"
    p = proc.spawn_guarded(_fake_server(tmp_path), log, dict(os.environ))
    assert p.wait(60) == 0
    _check_server_log(log.read_text())


def test_a_logged_commands_header_and_output_are_redacted(tmp_path: Path) -> None:
    from toolchain import proc

    log = tmp_path / "build.log"
    seen: list[str] = []
    res = proc.run_logged(_fake_server(tmp_path), log, timeout=60, on_line=seen.append)
    assert res.returncode == 0
    _check_server_log(log.read_text())
    assert seen[-1] == "password=*** done"
    _clean("\n".join(seen))


def test_the_watchdog_streams_each_line_and_an_unfinished_one_while_the_server_runs(tmp_path: Path) -> None:
    """The readiness wait reads the log while the server runs: output may not wait for the server's exit."""
    from toolchain import proc

    go = tmp_path / "go"
    script = tmp_path / "slow_server.py"
    script.write_text(
        "import os, sys, time\n"
        "print('listening on 0.0.0.0:8000', flush=True)\n"
        "sys.stdout.write('prompt> '); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    log = tmp_path / "server.log"
    p = proc.spawn_guarded([sys.executable, str(script)], log, dict(os.environ))
    try:
        proc.wait_ready(
            lambda: None if log.read_text().endswith("listening on 0.0.0.0:8000\nprompt> ") else "waiting",
            timeout=60,
            stage="fake server",
            alive=lambda: None if p.poll() is None else pytest.fail(f"exited early: {log.read_text()}"),
        )
    finally:
        go.touch()
    assert p.wait(60) == 0


def test_lines_redact_a_secret_split_across_chunks() -> None:
    lines = redact.Lines(limit=64)
    out = lines.feed(b"token=TOK") + lines.feed(b"SECRET ok\nnext ") + lines.feed(b"Bearer BEARERSECRET0123\n")
    assert out == b"token=*** ok\nnext Bearer ***\n"
    assert lines.feed(b"\xff raw") == b"" and lines.flush() == b"\xff raw"  # not UTF-8: the bytes as they were
    assert lines.feed(b"x" * 70) == b"x" * 64 and lines.flush() == b"x" * 6  # no line grows without bound


def test_bench_provenance_holds_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.bench.options import BenchOptions
    from toolchain.bench.run import BenchWorkload, _result_document

    monkeypatch.setattr("toolchain.bench.run.build_result", lambda d: d)  # no load points: what goes in is the point
    monkeypatch.setattr(
        sys, "argv", ["toolchain", "bench", "--url", "http://alice:Pz9secret@h:8000", "--api-key", "TOKSECRET"]
    )
    opts = BenchOptions(url="http://alice:Pz9secret@h:8000/v1?token=TOKSECRET", protocol="openai", warmup=0)
    work = BenchWorkload("m", [], provenance={"metrics_url": "http://alice:Pz9secret@h:8002/metrics"})
    doc: Any = _result_document(opts, work, [], None, None)  # the document that would be built
    text = json.dumps(doc)
    _clean(text)
    assert doc["provenance"]["url"] == "http://h:8000/v1?token=***"
    assert doc["provenance"]["command"][-1] == "***"


# --- manifests: what the toolchain writes for a cluster -----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["kubernetes", "argo"])
def test_build_farm_manifests_refuse_a_registry_url_with_credentials(cli: Cli, tmp_path: Path, fmt: str) -> None:
    from tests.conftest import SPECS

    out = tmp_path / "jobs"
    r = cli(
        "matrix", SPECS / "llama-3.1-8b-fp8.yaml", "--format", fmt, "--out", out, "--offline",
        "--image", "registry.example.com/tc:1", "--registry", "oci://alice:Pz9secret@registry.example.com/engines",
    )  # fmt: skip
    assert r.exit_code == 2 and "carries credentials" in r.stderr and "--registry-secret" in r.stderr, r.output
    _clean(r.output)
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file() and "Pz9secret" in p.read_text()]


def test_deploy_refuses_a_registry_url_with_credentials(cli: Cli, tmp_path: Path) -> None:
    r = cli(
        "deploy", "engine_specs/llama-3.1-8b-fp8.yaml", "--cell", "h100-sxm-b64-s4096-i2048-tp1", "--tokenizer",
        tmp_path, "--registry", "s3://b/p?X-Amz-Security-Token=TOKSECRET", "--out", tmp_path / "o",
    )  # fmt: skip
    assert r.exit_code == 2 and "carries credentials" in r.stderr, r.output
    _clean(r.output)
    assert not (tmp_path / "o").exists()
