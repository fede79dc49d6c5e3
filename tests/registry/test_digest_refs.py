"""Digest references (``sha256:<hex>``, ``@sha256:<hex>``: the form registries and ORAS print) name an entry
wherever a key is accepted; another client's OCI artifact is listed by ``cache ls``; and the documented local
registry helper (``scripts/local-oci-registry.sh``) serves what ``cache push`` sends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.validators import shell
from toolchain.registry import open_registry

pytestmark = pytest.mark.timeout(300)
KEY = "d" * 64
SCRIPT = REPO / "scripts" / "local-oci-registry.sh"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _manifest_digest(oci_url: str, ref: str) -> str:
    b: Any = open_registry(oci_url).backend
    accept = "application/vnd.oci.image.manifest.v1+json"
    return str(httpx.head(f"{b.base}/manifests/{ref}", headers={"Accept": accept}).headers["Docker-Content-Digest"])


@pytest.mark.parametrize("form", ["sha256:{}", "@sha256:{}"])
def test_a_local_entry_pulls_and_shows_by_its_digest_reference(
    cli: Any, tmp_path: Path, engine_dir: Path, form: str
) -> None:
    reg = tmp_path / "registry"
    r = cli("cache", "push", engine_dir, "--registry", reg)
    assert r.exit_code == 0, r.output
    key = open_registry(str(reg)).keys()[0]
    ref = form.format(key)
    shown = cli("cache", "show", ref, "--registry", reg)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["key"] == key
    pulled = cli("cache", "pull", ref, tmp_path / "out", "--registry", reg)
    assert pulled.exit_code == 0, pulled.output
    assert _tree(tmp_path / "out") == _tree(engine_dir)


def test_show_names_the_digest_that_pins_the_entry(cli: Any, tmp_path: Path, engine_dir: Path) -> None:
    """`cache show` says, on stderr, the digest `cache pull --digest` and `deploy --engine-digest` take: a read-only
    way to the pin (only `cache sign`, which writes, printed it before). Pulling with it succeeds; after the key is
    replaced the same pin is refused."""
    reg = tmp_path / "registry"
    assert cli("cache", "push", engine_dir, "--registry", reg).exit_code == 0
    key = open_registry(str(reg)).keys()[0]
    shown = cli("cache", "show", key, "--registry", reg)
    assert shown.exit_code == 0, shown.output
    (line,) = [ln for ln in shown.stderr.splitlines() if ln.startswith("pin: ")]
    pin = line.split()[1]
    assert pin.startswith("sha256:") and len(pin) == 71, line
    ok = cli("cache", "pull", key, tmp_path / "a", "--registry", reg, "--digest", pin)
    assert ok.exit_code == 0, ok.output
    (engine_dir / "extra.txt").write_text("replaced")
    assert cli("cache", "push", engine_dir, "--registry", reg, "--key", key, "--force").exit_code == 0
    refused = cli("cache", "pull", key, tmp_path / "b", "--registry", reg, "--digest", pin)
    assert refused.exit_code == 6, refused.output


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.parametrize("form", ["sha256:{}", "@sha256:{}"])
def test_every_backend_pulls_and_shows_by_the_key_as_a_digest_reference(
    cli: Any, registry_url: str, tmp_path: Path, engine_dir: Path, form: str
) -> None:
    """The entry's key written as a digest reference names it on the local store, S3 (moto) and OCI alike."""
    r = cli("cache", "push", engine_dir, "--key", KEY, "--registry", registry_url)
    assert r.exit_code == 0, r.output
    ref = form.format(KEY)
    shown = cli("cache", "show", ref, "--registry", registry_url)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["key"] == KEY
    pulled = cli("cache", "pull", ref, tmp_path / "out", "--registry", registry_url)
    assert pulled.exit_code == 0, pulled.output
    assert _tree(tmp_path / "out") == _tree(engine_dir)
    tagged = cli("cache", "tag", ref, "prod", "--registry", registry_url)
    assert tagged.exit_code == 0, tagged.output
    assert open_registry(registry_url).tags()["prod"] == KEY


@pytest.mark.slow
@pytest.mark.server
def test_a_reference_the_registry_does_not_hold_is_a_user_error_on_every_backend(
    cli: Any, registry_url: str, tmp_path: Path, engine_dir: Path
) -> None:
    """`cache pull`/`show` of a key, digest or tag the registry lacks: one line naming `cache ls` for that
    registry, exit 2 as every user mistake (README's exit codes; before: exit 1)."""
    assert cli("cache", "push", engine_dir, "--key", KEY, "--registry", registry_url).exit_code == 0
    for ref in ("e" * 64, "sha256:" + "e" * 64, "@sha256:" + "e" * 64, "no-such-tag"):
        for args in (("show", ref), ("pull", ref, tmp_path / "none")):
            r = cli("cache", *args, "--registry", registry_url)
            lines = [ln for ln in r.output.splitlines() if ln.startswith("Error: ")]
            assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.output, (args, r.output)
            assert f"toolchain cache ls --registry {registry_url}" in lines[0], lines[0]
    assert not (tmp_path / "none").exists()


def test_an_oci_entry_pulls_by_the_manifest_digest_the_registry_prints(
    cli: Any, oci_url: str, tmp_path: Path, engine_dir: Path
) -> None:
    open_registry(oci_url).put(KEY, engine_dir)
    digest = _manifest_digest(oci_url, KEY)
    assert digest.startswith("sha256:") and digest[7:] != KEY  # the manifest's digest is not the engine key
    for i, ref in enumerate((digest, "@" + digest)):
        shown = cli("cache", "show", ref, "--registry", oci_url)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["key"] == KEY
        r = cli("cache", "pull", ref, tmp_path / f"o{i}", "--registry", oci_url)
        assert r.exit_code == 0, r.output
        assert _tree(tmp_path / f"o{i}") == _tree(engine_dir)
    # a digest the registry does not hold is the documented not-found error, one line
    r = cli("cache", "pull", "sha256:" + "0" * 64, tmp_path / "none", "--registry", oci_url)
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("Error: ")]) == 1, r.output


def test_cache_ls_lists_another_clients_artifact(
    cli: Any, oci_url: str, oci_env: Any, tmp_path: Path, engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import oras.client

    open_registry(oci_url).put(KEY, engine_dir)
    open_registry(oci_url).tag(KEY, "prod")  # the toolchain's own tag: listed once, by its key
    repo = oci_url.split("/", 3)[3]
    monkeypatch.chdir(engine_dir)
    oras.client.OrasClient(hostname=oci_env.host, insecure=True).push(
        target=f"{oci_env.host}/{repo}:from-oras", files=["config.json"]
    )
    monkeypatch.chdir(tmp_path)
    foreign = _manifest_digest(oci_url, "from-oras")[7:]
    r = cli("cache", "ls", "--json", "--registry", oci_url)
    assert r.exit_code == 0, r.output
    entries = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
    assert set(entries) == {KEY, foreign}
    assert entries[foreign]["kind"] == "artifact" and entries[foreign]["tags"] == ["from-oras"]
    assert entries[KEY]["tags"] == ["prod"]
    # the error's "run cache ls" hint now leads somewhere: the listed key pulls
    got = cli("cache", "pull", foreign[:12], tmp_path / "o", "--registry", oci_url)
    assert got.exit_code == 0, got.output
    assert (tmp_path / "o" / "config.json").read_bytes() == (engine_dir / "config.json").read_bytes()


@pytest.mark.slow
@pytest.mark.server
def test_cache_ls_says_why_it_skips_a_manifest_it_cannot_read(
    cli: Any, oci_url: str, tmp_path: Path, engine_dir: Path
) -> None:
    """An image index tagged in the repository (a multi-platform image pushed beside the engines) is no
    entry: `cache ls` names it and says why, on stderr and under --json (before: left out without a word)."""
    open_registry(oci_url).put(KEY, engine_dir)
    b: Any = open_registry(oci_url).backend
    mt = "application/vnd.oci.image.manifest.v1+json"
    head = httpx.head(f"{b.base}/manifests/{KEY}", headers={"Accept": mt})
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": mt,
                "digest": head.headers["Docker-Content-Digest"],
                "size": int(head.headers["Content-Length"]),
            }
        ],
    }
    put = httpx.put(
        f"{b.base}/manifests/multi-arch",
        content=json.dumps(index).encode(),
        headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
    )
    assert put.status_code == 201, put.text
    r = cli("cache", "ls", "--json", "--registry", oci_url)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [e["key"] for e in doc["entries"]] == [KEY]
    (skipped,) = doc["skipped"]
    assert "image index" in skipped["why"], skipped
    human = cli("cache", "ls", "--registry", oci_url)
    assert human.exit_code == 0, human.output
    said = [ln for ln in human.stderr.splitlines() if ln.startswith("skipped ")]
    assert len(said) == 1 and "image index" in said[0], human.stderr
    assert "1 manifest skipped" in human.stderr


def test_cache_ls_says_why_it_skips_an_unreadable_local_manifest(cli: Any, tmp_path: Path, engine_dir: Path) -> None:
    reg = tmp_path / "registry"
    assert cli("cache", "push", engine_dir, "--key", KEY, "--registry", reg).exit_code == 0
    other = "c" * 64
    (reg / "manifests" / f"{other}.json").write_text("{not json")
    r = cli("cache", "ls", "--json", "--registry", reg)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [e["key"] for e in doc["entries"]] == [KEY]
    assert [s["name"] for s in doc["skipped"]] == [other] and doc["skipped"][0]["why"]


def test_the_local_registry_script_passes_shellcheck(tmp_path: Path) -> None:
    shell(SCRIPT.read_text(), tmp_path, "local-oci-registry.sh")


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_the_local_registry_script_refuses_a_bad_port_in_one_line(port: str) -> None:
    r = subprocess.run([str(SCRIPT), port], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and r.stderr.count("Error: ") == 1 and "free TCP port" in r.stderr


def test_the_local_registry_script_serves_cache_push_and_ls(cli: Any, tmp_path: Path, engine_dir: Path) -> None:
    from tests.servers import free_port

    port = free_port()
    env = {**os.environ, "TOOLCHAIN_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [str(SCRIPT), str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the registry did not answer within 60 s"
                time.sleep(0.2)
        url = f"oci://127.0.0.1:{port}/llm/engines"
        os.environ["TOOLCHAIN_OCI_PLAIN_HTTP"] = "1"
        try:
            assert cli("cache", "push", engine_dir, "--registry", url).exit_code == 0
            r = cli("cache", "ls", "--json", "--registry", url)
        finally:
            del os.environ["TOOLCHAIN_OCI_PLAIN_HTTP"]
        assert r.exit_code == 0 and len(json.loads(r.stdout)["entries"]) == 1, r.output
        assert (tmp_path / "cache" / "oci-registry" / "data").is_dir()  # storage under $TOOLCHAIN_CACHE
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    banner = proc.stdout.read().decode() if proc.stdout else ""
    assert f"127.0.0.1:{port}" in banner and "TOOLCHAIN_OCI_PLAIN_HTTP=1" in banner
