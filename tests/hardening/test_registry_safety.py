"""Registry data safety: what is pulled is what was pushed, pulls are the user's own files, gc and push
never race into a broken entry, a key never silently changes content, and odd names are refused."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.errors import CorruptArtifactError, ManifestError, RegistryError, UserInputError
from toolchain.registry import open_registry
from toolchain.registry.store import blob_path, manifest_path

K1 = "1" * 64
K2 = "2" * 64


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    d = tmp_path / "engine"
    (d / "bin").mkdir(parents=True)
    (d / "rank0.engine").write_bytes(os.urandom(200_000))
    (d / "config.json").write_text('{"x": 1}')
    (d / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (d / "bin" / "run.sh").chmod(0o755)
    return d


def test_pull_hashes_content_even_when_size_mtime_and_inode_are_unchanged(tmp_path: Path, engine: Path) -> None:
    r = open_registry(str(tmp_path / "reg"))
    m = r.put(K1, engine)
    r.get(K1, tmp_path / "first")  # a pull that verified (and, before, cached) every blob
    blob = r.backend.local_path(blob_path(m.files["rank0.engine"].digest))
    assert blob is not None
    st = blob.stat()
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0xFF
    blob.write_bytes(bytes(data))  # same size, same inode
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime
    with pytest.raises(CorruptArtifactError, match="does not match its digest"):
        r.get(K1, tmp_path / "second")
    assert not (tmp_path / "second").exists()
    with pytest.raises(CorruptArtifactError):
        r.get(K1, tmp_path / "third", link=True)


def test_pulled_files_are_independent_copies_with_the_executable_bit(tmp_path: Path, engine: Path) -> None:
    r = open_registry(str(tmp_path / "reg"))
    m = r.put(K1, engine)
    assert m.files["bin/run.sh"].executable and not m.files["config.json"].executable
    for link in (False, True):
        out = tmp_path / f"o{int(link)}"
        r.get(K1, out, link=link)
        assert os.access(out / "bin" / "run.sh", os.X_OK)
        assert not (out / "config.json").stat().st_mode & 0o111
    mode = (tmp_path / "o0" / "rank0.engine").stat().st_mode
    assert mode & stat.S_IWUSR  # the user's own copy
    with open(tmp_path / "o0" / "rank0.engine", "r+b") as f:
        f.write(b"changed")
    assert r.verify().corrupt == {}
    r.get(K1, tmp_path / "again")
    assert (tmp_path / "again" / "rank0.engine").read_bytes() == (engine / "rank0.engine").read_bytes()


def test_different_content_under_an_existing_key_is_refused_unless_forced(
    cli: Cli, tmp_path: Path, engine: Path
) -> None:
    reg = str(tmp_path / "reg")
    r = open_registry(reg)
    r.put(K1, engine)
    assert r.put(K1, engine).files == r.show(K1).files  # the same content: a no-op
    other = tmp_path / "other"
    other.mkdir()
    (other / "rank0.engine").write_bytes(b"different")
    with pytest.raises(UserInputError, match="different content"):
        r.put(K1, other)
    assert set(r.show(K1).files) == {"rank0.engine", "config.json", "bin/run.sh"}
    res = cli("cache", "push", other, "--key", K1, "--registry", reg)
    assert res.exit_code == 2 and "--force" in res.output
    res = cli("cache", "push", other, "--key", K1, "--registry", reg, "--force")
    assert res.exit_code == 0, res.output
    assert set(r.show(K1).files) == {"rank0.engine"}


def test_gc_waits_for_a_push_in_progress_and_never_breaks_it(
    tmp_path: Path, engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = open_registry(str(tmp_path / "reg"))
    backend = type(r.backend)
    blobs_written = threading.Event()
    release = threading.Event()
    real = backend.write_new  # a new entry's manifest is created (never written over) by write_new

    def slow_manifest(
        self: Any, path: str, data: bytes
    ) -> Any:  # the push has stored its blobs and not yet its manifest
        if path.startswith("manifests/"):
            blobs_written.set()
            release.wait(30)
        return real(self, path, data)

    monkeypatch.setattr(backend, "write_new", slow_manifest)
    errors: list[BaseException] = []

    def push() -> None:
        try:
            open_registry(str(tmp_path / "reg")).put(K1, engine)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=push)
    t.start()
    assert blobs_written.wait(30)
    plan = r.gc_plan(grace_s=0)  # every blob of the push looks unreferenced now
    assert plan.blobs
    with pytest.raises(RegistryError, match="busy"):
        r.gc(plan, lock_timeout=0.3)
    release.set()
    t.join(30)
    assert not errors
    r.gc(plan)  # runs after the push: the blobs are referenced by then and kept
    r.get(K1, tmp_path / "o")
    assert r.verify().corrupt == {}


def test_gc_keeps_young_blobs_and_removes_what_killed_pushes_left(tmp_path: Path, engine: Path) -> None:
    r = open_registry(str(tmp_path / "reg"))
    r.put(K1, engine)
    r.backend.delete(manifest_path(K1))  # a push killed before its manifest
    (Path(r.backend.url) / "tmp" / ".rank0.engine.abc.tmp").write_bytes(b"x" * 5000)  # and its half-written blob
    assert r.gc_plan().blobs == []  # inside the grace period
    r.gc(r.gc_plan())
    assert list(r.backend.list("tmp/")) == []  # no push holds the store: every temp file is garbage
    r.gc(r.gc_plan(grace_s=0))
    assert list(r.backend.list("blobs/")) == []


@pytest.mark.parametrize("name", ["a\\b.bin", "new\nline.bin", "tab\there", "del\x7f"])
def test_odd_file_names_in_push_are_one_line_errors(cli: Cli, tmp_path: Path, name: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / name).write_bytes(b"x")
    res = cli("cache", "push", src, "--key", K1, "--registry", tmp_path / "reg")
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert res.output.startswith("Error: ") and "cannot be stored" in res.output and res.output.count("\n") == 1


@pytest.mark.parametrize(
    "files",
    [
        {"a": None, "a/b": None},
        {"n" * 300: None},
        {("d" * 200 + "/") * 25 + "f": None},
        {"x\ny": None},
    ],
)
def test_hostile_pulled_manifests_are_refused(cli: Cli, tmp_path: Path, engine: Path, files: dict[str, None]) -> None:
    reg = str(tmp_path / "reg")
    r = open_registry(reg)
    m = r.put(K1, engine)
    entry = json.loads(m.model_dump_json())
    one = entry["files"]["config.json"]
    entry["files"] = {p: one for p in files}
    r.backend.write_bytes(manifest_path(K1), json.dumps(entry).encode())
    with pytest.raises(ManifestError):
        r.get(K1, tmp_path / "o")
    res = cli("cache", "pull", K1, tmp_path / "o2", "--registry", reg)
    assert res.exit_code == 1 and res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_keys_and_tags_with_a_trailing_newline_are_not_keys_or_tags(cli: Cli, tmp_path: Path, engine: Path) -> None:
    reg = str(tmp_path / "reg")
    r = open_registry(reg)
    m = r.put(K1, engine)
    (Path(r.backend.url) / "manifests" / f"{K2}\n.json").write_text(m.model_dump_json().replace(K1, K2))
    assert r.keys() == [K1]
    with pytest.raises(UserInputError):
        r.tag(K1, "prod\n")
    res = cli("cache", "show", K1 + "\n", "--registry", reg)
    assert res.exit_code != 0 and res.output.startswith("Error: ")
    res = cli("cache", "push", engine, "--key", "１" * 64, "--registry", reg)
    assert res.exit_code == 2
