"""Canonical JSON, streaming file hashes, directory digests with a stat cache, atomic writes.

Digests always carry their algorithm: ``sha256:<hex>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK = 16 * 1024 * 1024
ALGO = "sha256"
# Below this size a file is hashed on one thread: starting threads would cost more than they save.
THREADED_MIN = 4 * 1024 * 1024


def canonical_json(obj: Any) -> str:
    """Stable JSON: sorted keys, no whitespace, UTF-8, no NaN; equal data -> equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# a pin on an entry's manifest (`cache pull --digest`, `deploy --engine-digest`): sha256:HEX or @sha256:HEX
_PIN = re.compile(r"@?(sha256:[0-9a-f]{64})")


def pinned_digest(text: str, flag: str) -> str:
    """The ``sha256:<hex>`` that a pin flag names (``@sha256:<hex>`` is the same digest); anything else is the
    user's mistake, said in one line naming ``flag``."""
    m = _PIN.fullmatch(text)
    if m is None:
        from toolchain.errors import UserInputError

        raise UserInputError(
            f"{flag} {text[:80]!r} is not a digest",
            "give sha256: and 64 lower-case hex digits (the `pin:` line of `toolchain cache show KEY`)",
        )
    return m.group(1)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_hasher(algo: str, *, threaded: bool = False) -> Any:
    """A hasher; ``threaded`` blake3 spreads each large ``update`` over all cores (sha256 cannot)."""
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "blake3":
        import blake3

        return blake3.blake3(max_threads=blake3.blake3.AUTO) if threaded else blake3.blake3()
    raise ValueError(f"unknown digest algorithm {algo!r}")


def fastest_algo() -> str:
    """blake3 when installed (about 2.3x sha256 on this machine, see benchmarks/), else sha256."""
    try:
        import blake3  # noqa: F401
    except ImportError:
        return "sha256"
    return "blake3"


def hash_file(path: Path, algo: str = ALGO, sink: int | None = None) -> str:
    """``<algo>:<hex>`` of a file, read once (and written to fd ``sink`` on the way).

    blake3 hashes a large file on every core, as ``b3sum`` does: over a memory map when nothing is
    copied, chunk by chunk when the bytes also go to ``sink``. sha256 is sequential by design.
    """
    threaded = algo == "blake3" and os.stat(path).st_size >= THREADED_MIN
    h = new_hasher(algo, threaded=threaded)
    if threaded and sink is None:
        h.update_mmap(str(path))
        return f"{algo}:{h.hexdigest()}"
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if sink is not None:
                write_all(sink, view[:n])
    return f"{algo}:{h.hexdigest()}"


def hash_file_as(path: Path, algos: tuple[str, ...], sink: int | None = None) -> dict[str, str]:
    """``{algo: "<algo>:<hex>"}`` for each of ``algos``, the file read once (and written to fd ``sink`` on the
    way): a store that keeps blake3 blobs gets the sha256 of a content key from the same read."""
    if len(algos) == 1:
        return {algos[0]: hash_file(path, algos[0], sink)}
    big = os.stat(path).st_size >= THREADED_MIN
    hashers = {a: new_hasher(a, threaded=a == "blake3" and big) for a in algos}
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            for h in hashers.values():
                h.update(view[:n])
            if sink is not None:
                write_all(sink, view[:n])
    return {a: f"{a}:{h.hexdigest()}" for a, h in hashers.items()}


def write_all(fd: int, data: memoryview | bytes) -> None:
    """``os.write`` until every byte is written (a single call may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def iter_files(root: Path) -> Iterator[Path]:
    """Regular files under root in a stable order (symlinks refused by callers that care)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


def stat_signature(st: os.stat_result) -> list[int]:
    """What must be unchanged for a digest computed earlier to still hold: size, mtime, ctime, inode,
    device, link count. ctime cannot be set from user space (``touch -d``
    sets mtime and bumps ctime), and every write, chmod, rename or link count change moves it."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_nlink]


class StatCache:
    """Maps a file's path and stat signature to the digest read from it, so unchanged files are not
    re-read. An entry is only ever written right after the file was hashed, with the signature taken
    before and checked again after the read (a file written meanwhile is not remembered).
    """

    SCHEMA = 3  # entries: [size, mtime_ns, ctime_ns, inode, device, nlink, digest]

    def __init__(self, path: Path | None, algo: str = ALGO) -> None:
        self.path = path
        self.algo = algo
        self._data: dict[str, list[Any]] = {}
        self._dirty = False
        if path is not None and path.exists():
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                if isinstance(data, dict) and data.get("schema") == self.SCHEMA:
                    self._data = data["entries"]

    def _key(self, file: Path) -> str:
        return f"{self.algo}:{os.path.abspath(file)}"

    def lookup(self, file: Path, st: os.stat_result | None = None) -> str | None:
        """The remembered digest when the file's signature is unchanged, else None."""
        hit = self._data.get(self._key(file))
        if hit is not None and hit[:-1] == stat_signature(st or file.stat()):
            return str(hit[-1])
        return None

    def record(self, file: Path, before: os.stat_result, digest: str) -> None:
        """Remember ``digest`` for ``file`` if it still has the signature it had (``before``) the read."""
        sig = stat_signature(before)
        if stat_signature(file.stat()) == sig:
            self._data[self._key(file)] = [*sig, digest]
            self._dirty = True

    def forget(self, file: Path) -> None:
        if self._data.pop(self._key(file), None) is not None:
            self._dirty = True

    def digest(self, file: Path, *, rehash: bool = False) -> str:
        """The file's digest: remembered when its signature is unchanged (unless ``rehash``), else read."""
        st = file.stat()
        if not rehash:
            hit = self.lookup(file, st)
            if hit is not None:
                return hit
        d = hash_file(file, self.algo)
        self.record(file, st, d)
        return d

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"schema": self.SCHEMA, "entries": self._data}))
        self._dirty = False


@functools.cache
def shared_stat_cache(path: Path) -> StatCache:
    """One StatCache per cache file and process, so repeated digests do not reload it from disk."""
    return StatCache(path)


def dir_digest(
    root: Path, *, exclude: tuple[str, ...] = (), cache: StatCache | None = None, rehash: bool = False
) -> str:
    """Digest of a directory's relative file names and contents (``cache`` skips re-reading unchanged files;
    the caller saves it; ``rehash`` reads every file again)."""
    cache = cache or StatCache(None)
    entries = []
    for f in iter_files(root):
        rel = f.relative_to(root).as_posix()
        if rel in exclude:
            continue
        entries.append([rel, cache.digest(f, rehash=rehash)])
    return f"{ALGO}:{sha256_text(canonical_json(entries))}"


@contextlib.contextmanager
def staged_file(
    dest: Path, *, tmp_dir: Path | None = None, mode: int | None = None, exclusive: bool = False
) -> Iterator[int]:
    """A file descriptor on a unique temp file (beside ``dest`` or in ``tmp_dir``): fsynced and renamed
    over ``dest`` when the block succeeds, removed when it fails, so ``dest`` is never half-written.
    ``exclusive``: hard-linked into place instead, never over an existing ``dest`` (FileExistsError)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=tmp_dir or dest.parent)
    try:
        yield fd
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if mode is not None:
            os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, dest)  # link(2) fails when the name is taken: of two writers exactly one wins
            os.unlink(tmp)
        else:
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
        write_all(fd, text.encode("utf-8"))


def check_replaceable(dest: Path, marker: str | None, flag: str = "--out") -> None:
    """Refuse to let ``--force`` replace a directory the toolchain did not write: one holding the working
    directory or the home directory, or (with ``marker``) a non-empty one without the toolchain's marker file.
    An absent or empty ``dest`` is always fine."""
    from toolchain.errors import UserInputError

    dest = Path(dest).resolve()
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    for keep in (Path.cwd().resolve(), Path.home().resolve()):
        if dest == keep or dest in keep.parents:
            raise UserInputError(
                f"{dest} holds the {'working' if keep == Path.cwd().resolve() else 'home'} directory; "
                "--force would replace it",
                f"give {flag} a new or empty directory",
            )
    if marker is not None and not (dest / marker).is_file():
        raise UserInputError(
            f"{dest} holds files the toolchain did not write (no {marker}); --force replaces only its own output",
            f"give {flag} a new or empty directory",
        )


_STAGED_RE = r"\.{name}\.(?:{labels})\.[a-z0-9_]{{8}}"


def _locked_dir(parent: Path, prefix: str, final: str) -> tuple[Path, int]:
    """A new directory ``parent/<final>XXXXXXXX`` whose fd holds an exclusive flock for as long as the fd is open.

    It is made under a ``.staging`` name and renamed once locked, so a directory under the ``final`` name is locked
    from the moment it appears: the sweep below never takes a live one for a dead one."""
    raw = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = os.open(raw, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    named = parent / (final + raw.name[len(prefix) :])
    os.rename(raw, named)
    return named, fd


def sweep_staged(dest: Path, labels: tuple[str, ...] = ("partial", "old")) -> int:
    """Remove the staging directories a killed run left beside ``dest`` (``.NAME.partial.*``, ``.NAME.old.*``):
    those no live process holds locked. Returns how many were removed."""
    pattern = re.compile(_STAGED_RE.format(name=re.escape(dest.name), labels="|".join(map(re.escape, labels))))
    removed = 0
    try:
        siblings = list(dest.parent.iterdir())
    except OSError:
        return 0
    for p in siblings:
        if not pattern.fullmatch(p.name) or p.is_symlink() or not p.is_dir():
            continue
        try:
            fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live run holds it
            continue
        try:
            shutil.rmtree(p, ignore_errors=True)
            removed += not p.exists()
        finally:
            os.close(fd)
    return removed


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a directory, hard-linking files where the filesystem allows (engines are large)."""
    shutil.copytree(src, dst, copy_function=_link_or_copy, symlinks=False)


@contextlib.contextmanager
def staged_dir(dest: Path, label: str = "partial") -> Iterator[Path]:
    """A temp dir beside ``dest``: renamed over ``dest`` when the block succeeds, removed when it fails
    (exception, Ctrl-C, disk full), so nothing half-written ever sits at ``dest``.

    The temp dir is flock-ed while it lives and journaled in the cache (:func:`staging_journal`); staging dirs that
    a killed run (kill -9) left beside ``dest`` hold no lock and are removed by the next run towards the same
    ``dest``, or by `toolchain cache gc` wherever they are (:func:`stale_staging`)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    sweep_staged(dest, (label, "old"))
    tmp, fd = _locked_dir(dest.parent, f".{dest.name}.staging.", f".{dest.name}.{label}.")
    entry = _journal(tmp)
    try:
        yield tmp
        if dest.exists():
            old, old_fd = _locked_dir(dest.parent, f".{dest.name}.staging.", f".{dest.name}.old.")
            old_entry = _journal(old)
            try:
                os.replace(dest, old / "x")
                shutil.rmtree(old, ignore_errors=True)
            finally:
                _unjournal(old_entry)
                os.close(old_fd)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _unjournal(entry)
        os.close(fd)


# --- the staging journal: where live runs stage, so that gc finds what killed ones left -------------------------

# a staging directory's name, whatever its destination and label: .NAME.LABEL.XXXXXXXX
_ANY_STAGED = re.compile(r"\..+\.[a-z]+\.[a-z0-9_]{8}")


def staging_journal() -> Path:
    """``$TOOLCHAIN_CACHE/staging/``: one file per staging directory in use, named by a digest of its path and
    holding that path. A run removes its file when its staging ends (renamed over the destination, or removed);
    a run killed with SIGKILL leaves it, and `toolchain cache gc` finds the directory through it."""
    from toolchain import settings

    return settings.cache_home() / "staging"


def _journal(staging: Path) -> Path | None:
    """Record ``staging`` in the journal; None when the cache cannot be written (the journal only helps gc: a
    read-only cache never stops a pull)."""
    path = str(staging.resolve())
    entry = staging_journal() / f"{sha256_text(path)[:32]}.path"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with staged_file(entry) as fd:
            write_all(fd, path.encode("utf-8"))
    except OSError:
        return None
    return entry


def _unjournal(entry: Path | None) -> None:
    if entry is not None:
        with contextlib.suppress(OSError):
            entry.unlink()


def _tree_size(p: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _journaled() -> Iterator[tuple[Path, Path | None]]:
    """(journal file, the staging directory it names, or None when the name is no staging directory's)."""
    try:
        entries = sorted(staging_journal().glob("*.path"))
    except OSError:
        return
    for entry in entries:
        try:
            text = entry.read_bytes()[:4096].decode("utf-8")
        except (OSError, UnicodeDecodeError):
            yield entry, None
            continue
        p = Path(text)
        # never trust a name from a file: an absolute path whose last part is a staging directory's name
        ok = p.is_absolute() and ".." not in p.parts and _ANY_STAGED.fullmatch(p.name) is not None
        yield entry, p if ok and sha256_text(text)[:32] == entry.stem else None


def _unlocked(p: Path) -> int | None:
    """An fd holding ``p``'s flock when no live run holds it (the caller closes it); None when one does, or when
    ``p`` is not a real directory."""
    if p.is_symlink() or not p.is_dir():
        return None
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def stale_staging() -> list[tuple[Path, int]]:
    """The staging directories that killed runs left, wherever their destination was: those the journal names
    that no live process holds locked, with their sizes. Looks, removes nothing."""
    found: list[tuple[Path, int]] = []
    for _entry, p in _journaled():
        if p is None:
            continue
        fd = _unlocked(p)
        if fd is None:
            continue
        try:
            found.append((p, _tree_size(p)))
        finally:
            os.close(fd)
    return found


def remove_stale_staging(paths: list[Path] | None = None) -> int:
    """Remove the staging directories killed runs left (``paths``, from :func:`stale_staging`; default: all of
    them), each re-checked under its lock: one a live run holds now is kept. Journal files whose directory is
    gone, or that name no staging directory, are dropped. Returns the bytes freed."""
    wanted = None if paths is None else {str(p) for p in paths}
    freed = 0
    for entry, p in _journaled():
        if p is None or not p.exists():
            _unjournal(entry)
            continue
        if wanted is not None and str(p) not in wanted:
            continue
        fd = _unlocked(p)
        if fd is None:  # a live run's
            continue
        try:
            size = _tree_size(p)
            shutil.rmtree(p, ignore_errors=True)
            if not p.exists():
                freed += size
                _unjournal(entry)
        finally:
            os.close(fd)
    return freed
