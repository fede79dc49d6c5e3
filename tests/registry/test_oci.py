"""The OCI backend against a real CNCF distribution registry on 127.0.0.1: faults (kill -9 during push,
401/403/404/5xx, broken streams), the bearer-token flow with Docker-config credentials, and ORAS interop
(oras-py pushes what the toolchain pulls and pulls what the toolchain pushes)."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.registry.oci_proxy import ProxyState, proxy
from tests.servers import RegistryServer
from toolchain.errors import CorruptArtifactError, RegistryAuthError, RegistryURLError
from toolchain.registry import open_registry
from toolchain.registry.oci import parse_oci_url
from toolchain.registry.oci.mapping import ARTIFACT_TYPE, TITLE
from toolchain.registry.store import blob_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
KEY = "c" * 64
MB = 2**20


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("Error: ")]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def _engine(d: Path, big: int = 0) -> Path:
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"build_config": {"max_batch_size": 8}}')
    (d / "rank0.engine").write_bytes(os.urandom(big or 300_000))
    (d / "sub" / "model.cache").write_bytes(b"timing" * 100)
    (d / "run.sh").write_text("#!/bin/sh\n")
    (d / "run.sh").chmod(0o755)
    return d


# --- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("oci://reg.example.com", "names no repository"),
        ("oci://reg.example.com/engines:v1", "names a tag or digest"),
        ("oci://reg.example.com/Engines", "not an OCI repository name"),
        ("oci://bad_host!/engines", "is not a host"),
    ],
)
def test_bad_oci_urls_are_user_errors(url: str, why: str) -> None:
    with pytest.raises(RegistryURLError, match=why):
        parse_oci_url(url)


def test_https_is_the_default_and_plain_http_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCHAIN_OCI_PLAIN_HTTP", raising=False)
    assert open_registry("oci://127.0.0.1:5000/a/b").backend.base == "https://127.0.0.1:5000/v2/a/b"  # type: ignore[attr-defined]
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    assert open_registry("oci://127.0.0.1:5000/a/b").backend.base == "http://127.0.0.1:5000/v2/a/b"  # type: ignore[attr-defined]


def test_https_to_a_plain_http_registry_says_to_set_plain_http(
    oci_server: RegistryServer, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLCHAIN_OCI_PLAIN_HTTP", raising=False)
    r = cli("cache", "ls", "--registry", oci_server.url("engines/x"))
    assert r.exit_code == 2  # a setting the user must choose: a user mistake (errors.py), not a broken registry
    assert "TOOLCHAIN_OCI_PLAIN_HTTP=1" in _one_error_line(r.output)


# --- the layout ----------------------------------------------------------------------------------


def test_an_entry_is_an_oras_layout_artifact_tagged_by_key(oci_url: str, tmp_path: Path) -> None:
    import httpx

    r = open_registry(oci_url)
    m = r.put(KEY, _engine(tmp_path / "e"), provenance={"gpu": {"name": "NVIDIA H100 80GB HBM3"}})
    b: Any = r.backend
    got = httpx.get(f"{b.base}/manifests/{KEY}", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    man = got.json()
    assert man["artifactType"] == ARTIFACT_TYPE
    titles = {layer["annotations"][TITLE]: layer["digest"] for layer in man["layers"]}
    assert titles == {rel: f.digest for rel, f in m.files.items()}
    # the config is the toolchain's record of the entry (docs/oci-registry.md, "Content trust")
    record = man["config"]
    assert record["mediaType"] == "application/vnd.toolchain.record.v1+json"
    assert man["annotations"]["dev.toolchain.record"] == record["digest"]
    rec = json.loads(httpx.get(f"{b.base}/blobs/{record['digest']}").content)
    assert rec["key"] == KEY and {k: v["digest"] for k, v in rec["files"].items()} == titles
    assert all(d.startswith("sha256:") for d in titles.values())
    ann = man["annotations"]
    assert ann["dev.toolchain.key"] == KEY
    assert json.loads(ann["dev.toolchain.provenance"]) == {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}
    assert "org.opencontainers.image.created" in ann and ann["dev.toolchain.content"].startswith("sha256:")
    assert httpx.get(f"{b.base}/tags/list").json()["tags"] == [KEY]


def test_push_uploads_each_blob_once_and_skips_what_the_registry_has(oci_url: str, tmp_path: Path) -> None:
    src = _engine(tmp_path / "e", big=40 * MB)  # one file above the in-memory size: chunked upload
    r = open_registry(oci_url)
    b: Any = r.backend
    b.requests.clear()
    r.put(KEY, src)
    posts = [p for m, p in b.requests if m == "POST"]
    assert len(posts) == 6  # empty config + 4 distinct files + the entry's record, nothing twice
    assert any(m == "PATCH" for m, _ in b.requests)
    # a second machine pushes the same engine under another key: nothing is sent again (HEAD finds every blob)
    other = open_registry(oci_url)
    ob: Any = other.backend
    small = tmp_path / "small"
    small.mkdir()
    for name in ("config.json", "run.sh"):
        (small / name).write_bytes((src / name).read_bytes())
    ob.requests.clear()
    other.put("d" * 64, small)
    assert not any(m == "PATCH" for m, _ in ob.requests)
    assert len([m for m, _ in ob.requests if m == "POST"]) == 1  # the new entry's record, no file again


# --- faults --------------------------------------------------------------------------------------


def test_sigkill_during_push_leaves_no_tag_that_pulls(oci_url: str, tmp_path: Path) -> None:
    src = tmp_path / "engine"
    src.mkdir()
    rng = random.Random(5)
    for i in range(3):
        (src / f"rank{i}.engine").write_bytes(rng.randbytes(24 * MB))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "toolchain.cli.main", "cache", "push", str(src), "--key", KEY, "--registry", oci_url]
    for i in range(3):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.8, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        r = open_registry(oci_url)
        assert r.verify().corrupt == {}
        if r.exists(KEY):  # the push finished before the kill: the whole entry, or nothing
            r.get(KEY, tmp_path / f"o{i}")
            assert _tree(tmp_path / f"o{i}") == _tree(src)
            r.backend.delete(f"manifests/{KEY}.json")
        assert not r.exists(KEY)
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False).returncode == 0
    open_registry(oci_url).get(KEY, tmp_path / "final")
    assert _tree(tmp_path / "final") == _tree(src)


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [
        (401, 2, ["refused", "docker login"]),
        (403, 2, ["denied", "access"]),
        (404, 1, ["404", "check the URL"]),
        (503, 75, ["503", "try again later"]),  # transient: EX_TEMPFAIL, a scheduler retries it
    ],
)
def test_registry_errors_are_one_line_naming_the_registry_and_the_fix(
    status: int, code: int, words: list[str], cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("TOOLCHAIN_OCI_USERNAME", "alice")
    monkeypatch.setenv("TOOLCHAIN_OCI_PASSWORD", "s3cret-Pa55")
    src = _engine(tmp_path / "e")
    with proxy(ProxyState(status=status)) as host:
        for args in (("cache", "ls"), ("cache", "push", src, "--key", KEY), ("cache", "pull", KEY, tmp_path / "o")):
            t0 = time.monotonic()
            r = cli(*args, "--registry", f"oci://{host}/engines/x")
            assert time.monotonic() - t0 < 15
            assert r.exit_code == code, r.output
            line = _one_error_line(r.output)
            assert host in line and all(w in line for w in words), line
            assert "s3cret-Pa55" not in r.output
    assert not (tmp_path / "o").exists()


def test_a_broken_download_resumes_with_range(oci_env: RegistryServer, tmp_path: Path) -> None:
    src = _engine(tmp_path / "e", big=8 * MB)
    state = ProxyState(upstream=oci_env.host)
    with proxy(state) as host:
        r = open_registry(f"oci://{host}/engines/resume")
        r.put(KEY, src)
        state.cut_blob_once = state.fail_range_once = True  # cut half-way, then a 503 to the first resume
        state.log.clear()
        r.get(KEY, tmp_path / "o")
    assert _tree(tmp_path / "o") == _tree(src)
    ranged = [h.get("Range") for m, p, h in state.log if m == "GET" and "/blobs/" in p and h.get("Range")]
    assert len(ranged) == 2 and ranged[0] == ranged[1] != "bytes=0-"  # resumed where it broke, twice


def test_a_broken_chunk_upload_resumes_where_the_registry_stopped(oci_env: RegistryServer, tmp_path: Path) -> None:
    src = _engine(tmp_path / "e", big=40 * MB)
    state = ProxyState(upstream=oci_env.host, cut_patch_once=True)
    with proxy(state) as host:
        r = open_registry(f"oci://{host}/engines/upresume")
        r.put(KEY, src)
        asked = [m for m, p, _ in state.log if "/blobs/uploads/" in p]
        r.get(KEY, tmp_path / "o")
    assert _tree(tmp_path / "o") == _tree(src)
    # the client asked where the upload stood (distribution cannot go on after a partial chunk: a new session)
    assert "GET" in asked and asked.count("POST") == 6 + 1  # empty blob, 4 files, the record; the new session


def test_a_registry_without_chunked_uploads_gets_whole_file_puts(oci_env: RegistryServer, tmp_path: Path) -> None:
    src = _engine(tmp_path / "e", big=40 * MB)
    state = ProxyState(upstream=oci_env.host, no_patch=True)
    with proxy(state) as host:
        r = open_registry(f"oci://{host}/engines/nopatch")
        r.put(KEY, src)
        r.get(KEY, tmp_path / "o")
    assert _tree(tmp_path / "o") == _tree(src)
    patches = [p for m, p, _ in state.log if m == "PATCH"]
    assert len(patches) == 1  # refused once; every later large file goes as one PUT


def test_a_corrupt_blob_served_by_the_registry_is_refused(
    oci_url: str, oci_server: RegistryServer, tmp_path: Path, cli: Any
) -> None:
    r = open_registry(oci_url)
    m = r.put(KEY, _engine(tmp_path / "e"))
    blob = oci_server.blob_data(m.files["rank0.engine"].digest)
    data = bytearray(blob.read_bytes())
    data[1234] ^= 0x01
    blob.write_bytes(bytes(data))
    with pytest.raises(CorruptArtifactError, match="does not match its digest"):
        r.get(KEY, tmp_path / "o")
    assert not (tmp_path / "o").exists()
    res = cli("cache", "pull", KEY, tmp_path / "o2", "--registry", oci_url)
    assert res.exit_code == 1 and "does not match its digest" in _one_error_line(res.output)


# --- token auth and credentials ------------------------------------------------------------------


def _docker_config(tmp_path: Path, cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "docker"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("DOCKER_CONFIG", str(d))


def test_bearer_token_flow_with_docker_config_credentials(
    oci_env: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    state = ProxyState(upstream=oci_env.host, users={"bob": "hunter2-token"})
    src = _engine(tmp_path / "e")
    with proxy(state) as host:
        url = f"oci://{host}/team/engines"
        auth = base64.b64encode(b"bob:hunter2-token").decode()
        _docker_config(tmp_path, {"auths": {f"http://{host}": {"auth": auth}}}, monkeypatch)
        assert cli("cache", "push", src, "--key", KEY, "--registry", url).exit_code == 0
        assert cli("cache", "tag", KEY, "prod", "--registry", url).exit_code == 0
        r = cli("cache", "pull", "prod", tmp_path / "o", "--registry", url)
        assert r.exit_code == 0, r.output
        assert _tree(tmp_path / "o") == _tree(src)
        scopes = {s for t in state.token_requests for s in t["scope"]}
        assert "repository:team/engines:pull,push" in scopes and all(t["basic"] for t in state.token_requests)
        # a wrong password: one line, exit 2, the secret never shown
        bad = base64.b64encode(b"bob:wrong-Secret-77").decode()
        _docker_config(tmp_path, {"auths": {host: {"auth": bad}}}, monkeypatch)
        r = cli("cache", "ls", "--registry", url)
        assert r.exit_code == 2
        line = _one_error_line(r.output)
        assert host in line and "refused" in line and "docker login" in line
        assert "wrong-Secret-77" not in r.output and bad not in r.output


def test_credentials_from_a_docker_credential_helper(
    oci_env: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-fake"
    asked = tmp_path / "asked"
    helper.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = get ] || exit 1\ncat > {asked}\n'
        'printf \'{"ServerURL":"x","Username":"carol","Secret":"helper-Secret-1"}\'\n'
    )
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    state = ProxyState(upstream=oci_env.host, users={"carol": "helper-Secret-1"})
    with proxy(state) as host:
        _docker_config(tmp_path, {"auths": {host: {}}, "credHelpers": {host: "fake"}}, monkeypatch)
        r = open_registry(f"oci://{host}/helped/engines")
        r.put(KEY, _engine(tmp_path / "e"))
        assert r.keys() == [KEY]
    assert asked.read_text() == host
    # credsStore: the same helper for every registry
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker2"))
    (tmp_path / "docker2").mkdir()
    (tmp_path / "docker2" / "config.json").write_text(json.dumps({"credsStore": "missing-helper"}))
    with (
        proxy(ProxyState(upstream=oci_env.host, users={"x": "y"})) as host,
        pytest.raises(RegistryAuthError, match="docker-credential-missing-helper"),
    ):
        open_registry(f"oci://{host}/helped/engines").keys()


def test_environment_credentials_win_and_anonymous_is_told_to_log_in(
    oci_env: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    state = ProxyState(upstream=oci_env.host, users={"dave": "env-Secret-9"})
    with proxy(state) as host:
        url = f"oci://{host}/env/engines"
        r = cli("cache", "ls", "--registry", url)
        assert r.exit_code == 2 and "anonymous access" in _one_error_line(r.output)
        monkeypatch.setenv("TOOLCHAIN_OCI_USERNAME", "dave")
        monkeypatch.setenv("TOOLCHAIN_OCI_PASSWORD", "env-Secret-9")
        assert cli("cache", "push", _engine(tmp_path / "e"), "--key", KEY, "--registry", url).exit_code == 0
        r = cli("cache", "ls", "--registry", url, "--json")
        assert r.exit_code == 0 and KEY in r.stdout and "env-Secret-9" not in r.output


# --- ORAS interop --------------------------------------------------------------------------------


def _oras(host: str) -> Any:
    import oras.client

    return oras.client.OrasClient(hostname=host, insecure=True)


def test_oras_pulls_what_the_toolchain_pushes(oci_url: str, oci_server: RegistryServer, tmp_path: Path) -> None:
    src = _engine(tmp_path / "e")
    r = open_registry(oci_url)
    r.put(KEY, src)
    r.tag(KEY, "prod")
    repo = oci_url.split("/", 3)[3]
    for ref in (KEY, "prod"):
        out = tmp_path / f"oras-{ref[:4]}"
        _oras(oci_server.host).pull(target=f"{oci_server.host}/{repo}:{ref}", outdir=str(out))
        assert _tree(out) == _tree(src)


def test_the_toolchain_pulls_what_oras_pushes(
    oci_url: str, oci_server: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    src = _engine(tmp_path / "e")
    repo = oci_url.split("/", 3)[3]
    files = [str(p.relative_to(src)) for p in sorted(src.rglob("*")) if p.is_file()]
    # oras-py titles a layer with the file's base name; its annotation file gives the nested path
    ann = tmp_path / "ann.json"
    ann.write_text(json.dumps({f: {TITLE: f} for f in files}))
    monkeypatch.chdir(src)
    target = f"{oci_server.host}/{repo}:v1"
    client = _oras(oci_server.host)
    client.push(target=target, files=files, annotation_file=str(ann), manifest_annotations={"by": "oras"})
    monkeypatch.chdir(tmp_path)
    res = cli("cache", "pull", "v1", tmp_path / "o", "--registry", oci_url)
    assert res.exit_code == 0, res.output
    assert _tree(tmp_path / "o") == _tree(src)
    reg = open_registry(oci_url)
    key = reg.resolve("v1")  # another client's artifact: its key is its manifest digest
    m = reg.show(key)
    assert m.kind == "artifact" and m.provenance["oci"]["annotations"]["by"] == "oras"
    reg.get(key, tmp_path / "by-digest")
    assert _tree(tmp_path / "by-digest") == _tree(src)
    # gc leaves another client's tags alone (its manifest is there by digest: the tag does not dangle)
    reg.gc(reg.gc_plan(grace_s=0))
    assert reg.tags() == {"v1": key}
    # its digests are checked like ours: a corrupt blob is refused
    bad = oci_server.blob_data(m.files["rank0.engine"].digest)
    bad.write_bytes(b"x" + bad.read_bytes()[1:])
    res = cli("cache", "pull", "v1", tmp_path / "o3", "--registry", oci_url)
    assert res.exit_code == 1 and "does not match its digest" in _one_error_line(res.output)
    assert not reg.backend.exists(blob_path("sha256:" + "0" * 64))


def test_credentials_are_never_sent_to_another_host_an_upload_location_names(monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    import httpx

    from toolchain.registry.oci import OCIBackend

    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("Authorization")))
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "http://storage.example/upload/1?sig=x"})
        return httpx.Response(201)

    monkeypatch.setenv("TOOLCHAIN_OCI_PLAIN_HTTP", "1")
    b = OCIBackend("registry.example", "team/engines", client=httpx.Client(transport=httpx.MockTransport(handler)))
    b._auth = "Bearer registry-token"
    b.upload_bytes(b"data", "sha256:" + hashlib.sha256(b"data").hexdigest())
    assert seen == [("registry.example", "Bearer registry-token"), ("storage.example", None)]
