"""Push reads each file once; unchanged files are not read again; the stat signature includes ctime;
multi-threaded blake3 and copy-while-hashing give the same digests as a plain one-shot hash."""

from __future__ import annotations

import os
from pathlib import Path

import blake3
import pytest

from toolchain import digest as dg
from toolchain.registry import open_registry
from toolchain.registry.store import blob_path

MB = 2**20


def rchar() -> int:
    """Bytes this process has read through read()-like calls, page cache or not (proc(5))."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    d = tmp_path / "engine"
    d.mkdir()
    (d / "rank0.engine").write_bytes(os.urandom(24 * MB))
    (d / "config.json").write_text('{"build_config": {}}')
    return d


def test_push_reads_the_data_once_and_unchanged_files_not_at_all(engine: Path, tmp_path: Path) -> None:
    if not Path("/proc/self/io").exists():
        pytest.skip("needs /proc/self/io")
    reg = open_registry(str(tmp_path / "reg"))
    data = sum(f.stat().st_size for f in engine.iterdir())
    before = rchar()
    m = reg.put(None, engine)
    first = rchar() - before
    assert data <= first < data * 1.1, f"read {first / data:.2f}x the data"
    before = rchar()
    again = reg.put(None, engine)
    assert rchar() - before < MB  # stat signatures unchanged and blobs present: nothing re-read
    assert again.key == m.key and again.files == m.files
    blob = tmp_path / "reg" / blob_path(m.files["rank0.engine"].digest)
    assert blob.read_bytes() == (engine / "rank0.engine").read_bytes()
    want = blake3.blake3((engine / "rank0.engine").read_bytes()).hexdigest()
    assert m.files["rank0.engine"].digest == f"blake3:{want}"


def test_default_key_is_the_content(engine: Path, tmp_path: Path) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    k1 = reg.put(None, engine).key
    (engine / "config.json").write_text('{"build_config": {"x": 1}}')
    k2 = reg.put(None, engine).key
    (engine / "config.json").write_text('{"build_config": {}}')
    assert reg.put(None, engine).key == k1 != k2


def test_stat_signature_sees_a_rewrite_that_keeps_size_and_mtime(tmp_path: Path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 4096)
    cache = dg.StatCache(tmp_path / "sc.json")
    first = cache.digest(f)
    st = f.stat()
    with open(f, "r+b") as h:  # same inode, same size
        h.write(b"b")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back, as a copy tool or a clock skew would
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_size == st.st_size
    assert cache.digest(f) == dg.hash_file(f) != first
    cache.save()
    reloaded = dg.StatCache(tmp_path / "sc.json")
    assert reloaded.lookup(f) == dg.hash_file(f)
    assert reloaded.digest(f, rehash=True) == dg.hash_file(f)


@pytest.mark.parametrize("size", [0, 1, dg.THREADED_MIN - 1, dg.THREADED_MIN, dg.THREADED_MIN + dg.CHUNK + 7])
def test_hash_file_matches_a_one_shot_hash_and_copies_exactly(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    f = tmp_path / "f"
    f.write_bytes(data)
    want = "blake3:" + blake3.blake3(data).hexdigest()
    assert dg.hash_file(f, "blake3") == want
    fd = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT)
    try:
        assert dg.hash_file(f, "blake3", sink=fd) == want
    finally:
        os.close(fd)
    assert (tmp_path / "copy").read_bytes() == data


def test_write_all_finishes_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, b: real(fd, bytes(b)[:3]))
    fd = os.open(tmp_path / "o", os.O_WRONLY | os.O_CREAT)
    try:
        dg.write_all(fd, b"0123456789")
    finally:
        os.close(fd)
    assert (tmp_path / "o").read_bytes() == b"0123456789"
