"""`toolchain deploy` of a spec whose model is ``hf://org/name@rev`` with no tokenizer here: the tokenizer files
alone are fetched at that revision (a fake Hub on 127.0.0.1 serves the tiny checkpoint and records what is
asked), and offline it says so and names --tokenizer."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO_ID = "org/tiny"


@pytest.fixture
def fake_hub(tiny_checkpoint: Path) -> Iterator[tuple[str, list[str]]]:
    """A Hub that serves the tiny checkpoint's files at COMMIT (HEAD + GET .../resolve/REV/FILE, as
    huggingface_hub asks) and records every path requested."""
    files = {p.name: p.read_bytes() for p in tiny_checkpoint.iterdir() if p.is_file()}
    assert any(n.endswith(".safetensors") for n in files)
    asked: list[str] = []

    class Hub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, body: bool) -> None:
            asked.append(self.path)
            prefix = f"/{REPO_ID}/resolve/{COMMIT}/"
            name = self.path.split("?")[0][len(prefix) :] if self.path.startswith(prefix) else None
            data = files.get(name or "")
            if data is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_HEAD(self) -> None:
            self._answer(False)

        def do_GET(self) -> None:
            self._answer(True)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def _hub_env(monkeypatch: pytest.MonkeyPatch, url: str, offline: bool, cache: Path) -> None:
    """The Hub settings as a fresh process would read them (huggingface_hub reads its at import)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))


def _hub_spec(tmp_path: Path, architecture: str | None = None) -> Path:
    # the engine path: its preprocessing/postprocessing models need the tokenizer (the LLM API brings its own)
    d = yaml.safe_load((Path(__file__).resolve().parents[2] / "engine_specs" / "tiny-engine.yaml").read_text())
    d["model"]["source"] = f"hf://{REPO_ID}@{COMMIT}"
    if architecture:  # plans offline from the catalog; without it the planner reads config.json from the Hub
        d["model"]["architecture"] = architecture
    p = tmp_path / "hub.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.slow
def test_deploy_fetches_only_the_tokenizer_at_the_pinned_revision(
    cli: Cli, tmp_path: Path, fake_hub: tuple[str, list[str]], tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("huggingface_hub")
    url, asked = fake_hub
    _hub_env(monkeypatch, url, False, tmp_path / "hub-cache")
    out = tmp_path / "o"
    args = ("deploy", _hub_spec(tmp_path), "--engine", "c" * 64, "--registry", "s3://b/p", "--out", out)
    r = cli(*args)
    assert r.exit_code == 0, r.output
    assert "fetching the tokenizer of org/tiny@" + COMMIT in r.output
    tok = out / "image" / "model_repository" / "preprocessing" / "tokenizer"
    assert (tok / "tokenizer.json").read_bytes() == (tiny_checkpoint / "tokenizer.json").read_bytes()
    files = [p for p in asked if "/resolve/" in p]  # (huggingface_hub also asks /api/agent-harnesses)
    assert files and all(p.startswith(f"/{REPO_ID}/resolve/{COMMIT}/") for p in files), asked  # the pinned revision
    assert "tokenizer.json" in {p.rsplit("/", 1)[1] for p in files}
    assert not any(p.endswith(".safetensors") for p in asked), "no weights are fetched for a tokenizer"
    # offline, the cache now holds it: the same deploy needs no network
    _hub_env(monkeypatch, url, True, tmp_path / "hub-cache")
    n = len(asked)
    r = cli(*args[:-1], tmp_path / "o2")
    assert r.exit_code == 0, r.output
    assert len(asked) == n


def test_offline_without_a_cached_tokenizer_says_so(
    cli: Cli, tmp_path: Path, fake_hub: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("huggingface_hub")
    url, asked = fake_hub
    _hub_env(monkeypatch, url, True, tmp_path / "hub-cache")
    spec = _hub_spec(tmp_path, architecture="llama-3.1-8b")
    r = cli("deploy", spec, "--engine", "c" * 64, "--registry", "s3://b/p", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "not cached and HF_HUB_OFFLINE is set" in r.stderr and "pass --tokenizer DIR" in r.stderr
    assert not [p for p in asked if "/resolve/" in p] and not (tmp_path / "o").exists()
