"""Canonical JSON, streaming file hashes, directory digests with a stat cache, atomic writes.

Digests always carry their algorithm: ``sha256:<hex>``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK = 4 * 1024 * 1024
ALGO = "sha256"


def canonical_json(obj: Any) -> str:
    """Stable JSON: sorted keys, no whitespace, UTF-8, no NaN; equal data -> equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_hasher(algo: str) -> Any:
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "blake3":
        import blake3

        return blake3.blake3()
    raise ValueError(f"unknown digest algorithm {algo!r}")


def fastest_algo() -> str:
    """blake3 when installed (about 2.3x sha256 on this machine, see benchmarks/), else sha256."""
    try:
        import blake3  # noqa: F401
    except ImportError:
        return "sha256"
    return "blake3"


def hash_file(path: Path, algo: str = ALGO, sink: int | None = None) -> str:
    """``<algo>:<hex>`` of a file, read once in large chunks (and written to fd ``sink`` on the way)."""
    h = new_hasher(algo)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if sink is not None:
                os.write(sink, view[:n])
    return f"{algo}:{h.hexdigest()}"


def iter_files(root: Path) -> Iterator[Path]:
    """Regular files under root in a stable order (symlinks refused by callers that care)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


class StatCache:
    """Maps (path, size, mtime_ns, inode) to a digest so unchanged files are not re-read."""

    def __init__(self, path: Path | None, algo: str = ALGO) -> None:
        self.path = path
        self.algo = algo
        self._data: dict[str, list[Any]] = {}
        self._dirty = False
        if path is not None and path.exists():
            with contextlib.suppress(OSError, ValueError):
                self._data = json.loads(path.read_text())

    def digest(self, file: Path) -> str:
        st = file.stat()
        sig = [st.st_size, st.st_mtime_ns, st.st_ino]
        key = f"{self.algo}:{file.resolve()}"
        hit = self._data.get(key)
        if hit is not None and hit[:3] == sig:
            return str(hit[3])
        d = hash_file(file, self.algo)
        self._data[key] = [*sig, d]
        self._dirty = True
        return d

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(self._data))
        self._dirty = False


@functools.cache
def shared_stat_cache(path: Path) -> StatCache:
    """One StatCache per cache file and process, so repeated digests do not reload it from disk."""
    return StatCache(path)


def dir_digest(root: Path, *, exclude: tuple[str, ...] = (), cache: StatCache | None = None) -> str:
    """Digest of a directory's relative file names and contents (``cache`` skips re-reading unchanged files;
    the caller saves it)."""
    cache = cache or StatCache(None)
    entries = []
    for f in iter_files(root):
        rel = f.relative_to(root).as_posix()
        if rel in exclude:
            continue
        entries.append([rel, cache.digest(f)])
    return f"{ALGO}:{sha256_text(canonical_json(entries))}"


@contextlib.contextmanager
def staged_file(dest: Path, *, tmp_dir: Path | None = None, mode: int | None = None) -> Iterator[int]:
    """A file descriptor on a unique temp file (beside ``dest`` or in ``tmp_dir``): fsynced and renamed
    over ``dest`` when the block succeeds, removed when it fails, so ``dest`` is never half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=tmp_dir or dest.parent)
    try:
        yield fd
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a staged temp file."""
    with staged_file(path) as fd:
        os.write(fd, text.encode("utf-8"))


@contextlib.contextmanager
def staged_dir(dest: Path, label: str = "partial") -> Iterator[Path]:
    """A temp dir beside ``dest``: renamed over ``dest`` when the block succeeds, removed when it fails
    (exception, Ctrl-C, disk full), so nothing half-written ever sits at ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{label}.", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.replace(dest, old / "x")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
