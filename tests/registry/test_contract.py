"""One contract suite over every registry backend (local directory, S3 on a real moto server, an OCI
registry: CNCF distribution on 127.0.0.1)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pytest

from toolchain.errors import ArtifactNotFoundError, CorruptArtifactError, ManifestError, UserInputError
from toolchain.registry import open_registry
from toolchain.registry.store import blob_path, manifest_path

K1, K2 = "1" * 64, "2" * 64


def _tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_put_get_roundtrip(registry_url: str, engine_dir: Path, tmp_path: Path) -> None:
    r = open_registry(registry_url)
    assert not r.exists(K1)
    m = r.put(K1, engine_dir, provenance={"gpu": {"name": "NVIDIA H100 80GB HBM3"}})
    assert r.exists(K1) and r.keys() == [K1]
    assert set(m.files) == {"config.json", "rank0.engine", "sub/model.cache", "dup.engine"}
    assert m.files["rank0.engine"].digest == m.files["dup.engine"].digest  # stored once
    got = r.get(K1[:10], tmp_path / "out")
    assert got.key == K1 and _tree(tmp_path / "out") == _tree(engine_dir)
    assert r.show(K1).provenance["gpu"]["name"] == "NVIDIA H100 80GB HBM3"
    assert [e.key for e in r.ls()] == [K1]


def test_tags_resolve(registry_url: str, engine_dir: Path) -> None:
    r = open_registry(registry_url)
    r.put(K1, engine_dir)
    r.tag(K1, "prod")
    assert r.resolve("prod") == K1 and r.tags() == {"prod": K1}
    with pytest.raises(ArtifactNotFoundError):
        r.tag(K2, "x")


def test_a_short_key_is_asked_for_as_a_tag_only_where_the_listing_holds_that_tag(
    registry_url: str, engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: each short key tried as a tag was a "manifest unknown" error in an OCI registry's log."""
    r = open_registry(registry_url)
    r.put(K1, engine_dir)
    r.put(K2, engine_dir / "sub")
    r.tag(K2, "deadbeef")  # a tag that looks like a short key still resolves to what it tags
    asked: list[str] = []
    exists, read = r.backend.exists, r.backend.read_bytes

    def spy_exists(path: str) -> bool:
        asked.append(path)
        return exists(path)

    def spy_read(path: str) -> bytes:
        asked.append(path)
        return read(path)

    monkeypatch.setattr(r.backend, "exists", spy_exists)
    monkeypatch.setattr(r.backend, "read_bytes", spy_read)
    assert r.resolve(K1[:8]) == K1 and r.resolve(K2[:12]) == K2
    with pytest.raises(ArtifactNotFoundError):
        r.resolve("abcdef01")
    assert not [p for p in asked if p.startswith("refs/tags/")], asked
    assert r.resolve("deadbeef") == K2


def test_missing_key_names_the_registry(registry_url: str, tmp_path: Path) -> None:
    r = open_registry(registry_url)
    with pytest.raises(ArtifactNotFoundError) as e:
        r.get(K2, tmp_path / "o")
    assert r.url in e.value.message and K2 in e.value.message
    assert not (tmp_path / "o").exists()


def test_corrupt_blob_is_refused_and_repaired(
    registry_url: str, engine_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    r = open_registry(registry_url)
    m = r.put(K1, engine_dir)
    r.put(K2, engine_dir / "sub")
    bp = blob_path(m.files["rank0.engine"].digest)
    data = bytearray(r.backend.read_bytes(bp))
    data[100] ^= 0xFF
    local = r.backend.local_path(bp)
    if local is not None:
        local.chmod(0o644)
        local.write_bytes(bytes(data))
        local.chmod(0o444)
    elif registry_url.startswith("oci://"):  # content-addressed over the API: corrupt it in the server's storage
        request.getfixturevalue("oci_server").blob_data(m.files["rank0.engine"].digest).write_bytes(bytes(data))
    else:
        r.backend.write_bytes(bp, bytes(data))
    with pytest.raises(CorruptArtifactError):
        r.get(K1, tmp_path / "o")
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.partial*"))
    rep = r.verify()
    assert set(rep.corrupt) == {K1}
    assert local is None or local.stat().st_mode & 0o777 == 0o444  # verify without repair changes nothing
    rep = r.verify(repair=True)
    assert rep.removed == [K1] and not r.exists(K1) and r.exists(K2)
    assert r.verify().corrupt == {}


def test_killed_put_serves_nothing_and_gc_cleans(
    registry_url: str, engine_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    r = open_registry(registry_url)
    m = r.put(K1, engine_dir)
    # simulate a put killed after its blobs: drop the manifest, keep the blobs
    r.backend.delete(manifest_path(K1))
    with pytest.raises(ArtifactNotFoundError):
        r.get(K1, tmp_path / "o")
    assert r.gc_plan().blobs == []  # young blobs are kept: a push may still be writing its manifest
    if r.backend.gc_note is not None:  # OCI: no blob listing; the registry's own gc reclaims them
        plan = r.gc_plan(grace_s=0)
        assert plan.blobs == [] and plan.note and "garbage" in plan.note
        own = m.files["rank0.engine"].digest  # random bytes: no other test's entry holds them on the shared server
        assert r.backend.exists(blob_path(own))
        server = request.getfixturevalue("oci_server")
        server.garbage_collect()
        assert not server.blob_data(own).exists() and not r.backend.exists(blob_path(own))
        return
    plan = r.gc_plan(grace_s=0)
    assert {p for p, _ in plan.blobs} == {blob_path(f.digest) for f in m.files.values()}
    assert plan.bytes == sum({f.digest: f.size for f in m.files.values()}.values())
    r.gc(plan)
    assert list(r.backend.list("blobs/")) == []


def test_gc_keeps_referenced_blobs(registry_url: str, engine_dir: Path, tmp_path: Path) -> None:
    r = open_registry(registry_url)
    r.put(K1, engine_dir)
    plan = r.gc_plan()
    assert plan.blobs == [] and plan.bytes == 0
    r.gc(plan)
    r.get(K1, tmp_path / "o")


def test_manifest_with_escaping_path_is_refused(registry_url: str, engine_dir: Path, tmp_path: Path) -> None:
    r = open_registry(registry_url)
    m = r.put(K1, engine_dir)
    bad = json.loads(m.model_dump_json())
    bad["files"]["../../evil"] = bad["files"].pop("config.json")
    r.backend.write_bytes(manifest_path(K1), json.dumps(bad).encode())
    with pytest.raises(ManifestError, match="unsafe path"):
        r.get(K1, tmp_path / "o")
    assert not (tmp_path.parent / "evil").exists()


def test_existing_destination_and_disk_full(
    registry_url: str, engine_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = open_registry(registry_url)
    r.put(K1, engine_dir)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("keep me")
    with pytest.raises(UserInputError, match="already exists"):
        r.get(K1, tmp_path / "busy")
    assert (tmp_path / "busy" / "f").read_text() == "keep me"
    calls = {"n": 0}
    method = "restore" if r.backend.local_path("x") is not None else "get_file"  # how each backend writes
    real = getattr(type(r.backend), method)

    def full(self: Any, *args: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kw)

    monkeypatch.setattr(type(r.backend), method, full)
    with pytest.raises(OSError, match="No space"):
        r.get(K1, tmp_path / "o")
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*"))


def _put_worker(url: str, src: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    open_registry(url).put(K1, Path(src))


@pytest.mark.slow
def test_concurrent_puts_end_with_one_valid_entry(registry_url: str, engine_dir: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "TOOLCHAIN_", "HOME"))}
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_put_worker, args=(registry_url, str(engine_dir), env)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    r = open_registry(registry_url)
    assert r.keys() == [K1]
    assert r.verify().corrupt == {}
    r.get(K1, tmp_path / "o")
    assert _tree(tmp_path / "o") == _tree(engine_dir)


def test_symlinks_are_not_stored(registry_url: str, engine_dir: Path) -> None:
    (engine_dir / "link").symlink_to("/etc/passwd")
    with pytest.raises(UserInputError, match="not a regular file"):
        open_registry(registry_url).put(K1, engine_dir)


def test_gc_keeps_a_tag_repointed_after_the_plan(registry_url: str, engine_dir: Path) -> None:
    r = open_registry(registry_url)
    r.put(K1, engine_dir)
    r.tag(K1, "prod")
    r.tag(K1, "old")
    r.backend.delete(manifest_path(K1))  # both tags now dangle
    plan = r.gc_plan()
    assert sorted(plan.tags) == ["refs/tags/old", "refs/tags/prod"]
    r.put(K2, engine_dir)
    r.tag(K2, "prod")  # re-pointed at a live entry between the plan and its execution
    r.gc(plan)
    assert r.tags() == {"prod": K2}
