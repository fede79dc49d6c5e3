"""The registry API: put, get, exists, ls, show, tag/resolve, verify, gc (plan then execute)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.artifacts.layout import cache
from toolchain.digest import (
    StatCache,
    canonical_json,
    check_replaceable,
    fastest_algo,
    hash_file,
    hash_file_as,
    remove_stale_staging,
    sha256_text,
    shared_stat_cache,
    staged_dir,
    stale_staging,
)
from toolchain.errors import (
    ArtifactNotFoundError,
    CorruptArtifactError,
    ManifestError,
    UserInputError,
)
from toolchain.progress import Progress, silent
from toolchain.registry.backends import Backend
from toolchain.registry.capabilities import ChecksRecords, ReportsWaits, ResolvesManifestDigests
from toolchain.registry.connect import open_backend
from toolchain.registry.manifest import (
    KEY_RE,
    TAG_RE,
    EntryManifest,
    FileEntry,
    parse_manifest,
    safe_relpath,
)
from toolchain.registry.manifest import (
    blob_path as blob_path,  # re-exported: where callers have always found them
)
from toolchain.registry.manifest import (
    manifest_path as manifest_path,
)

if TYPE_CHECKING:
    from toolchain.registry.signing import Signer, Verifier

FEW_KEYS = 8  # up to this many keys, `existing` asks per key instead of listing the store


# gc leaves blobs younger than this alone: a push that is still writing (or reusing) them has no
# manifest yet. Pushes touch every blob they reuse, so the grace period covers pushes up to this long.
GC_GRACE_S = 3600.0


KEY_ALGO = "sha256"  # the digest a content key is made of, on every backend


def content_key(files: dict[str, FileEntry]) -> str:
    """The key of an entry named by its content: sha256 of every path with its sha256 digest and mode. The
    same directory has the same key on every backend, whichever digest the store keeps its blobs under (a local
    or S3 store: the fastest, blake3; OCI: sha256); before, the store's own digest went in, so a local registry
    and an OCI one named one directory differently. Entries stored under such keys keep them (a key is a name:
    they pull as before)."""
    bad = sorted(rel for rel, f in files.items() if not f.digest.startswith(f"{KEY_ALGO}:"))
    if bad:
        raise ValueError(f"content_key needs {KEY_ALGO} digests; {bad[0]} has {files[bad[0]].digest[:12]}...")
    listing = {rel: [f.digest, f.executable] for rel, f in sorted(files.items())}
    return sha256_text(canonical_json(listing))


@dataclass(frozen=True)
class GcPlan:
    blobs: list[tuple[str, int]]
    tags: list[str]  # dangling refs/tags/<name> paths
    tmp: list[tuple[str, int]]
    uploads: list[tuple[str, str]] = field(default_factory=list)  # unfinished S3 multipart uploads (key, id)
    grace_s: float = GC_GRACE_S
    note: str | None = None  # what this store's gc cannot do (OCI: list blobs), and who does it
    # staging directories of pulls (and other staged writes) on this machine that a kill -9 left, wherever their
    # destination was: found through the cache's staging journal (toolchain.digest.stale_staging)
    staging: list[tuple[str, int]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(s for _, s in self.blobs) + sum(s for _, s in self.tmp) + sum(s for _, s in self.staging)


@dataclass
class VerifyReport:
    checked: int = 0
    corrupt: dict[str, str] = field(default_factory=dict)  # key -> reason
    removed: list[str] = field(default_factory=list)


class Registry:
    def __init__(self, backend: Backend, *, allow_legacy: bool = False) -> None:
        """``allow_legacy``: serve an entry whose store keeps records (OCI) but which has none, pushed before
        records, on its content annotation alone (docs/signing.md "Trust policy")."""
        self.backend = backend
        self.url = backend.url
        if isinstance(backend, ChecksRecords):
            backend.allow_legacy = allow_legacy
        layout = cache()
        self._src_cache = StatCache(layout.statcache_blake3, "blake3")
        self._progress: Progress = silent

    @property
    def progress(self) -> Progress:
        """Transfer progress (bytes moved of the entry's total), and what a store that reports its waits
        (``ReportsWaits``: OCI) is waiting on."""
        return self._progress

    @progress.setter
    def progress(self, value: Progress) -> None:
        self._progress = value
        if isinstance(self.backend, ReportsWaits):
            self.backend.waiting = None if value is silent else (lambda line: value(line))

    @contextlib.contextmanager
    def _metered(self, stage: str, total: int) -> Iterator[Callable[[int], None]]:
        """Count bytes moved (from any thread) and report them; the backend meters while the block runs."""
        lock = threading.Lock()
        done = [0]

        def add(n: int) -> None:
            with lock:
                done[0] += n
                self.progress(stage, done[0], total, unit="B")

        self.progress(stage, 0, total, unit="B")
        self.backend.meter = add
        try:
            yield add
        finally:
            self.backend.meter = None

    # --- lookup -------------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """A full key, a unique key prefix (>= 8 hex), a tag, or a digest reference (``sha256:<hex>`` or
        ``@sha256:<hex>``, the form registries and ORAS print) -> the full key."""
        if KEY_RE.fullmatch(ref):
            return ref
        if (hexd := digest_hex(ref)) != ref:
            return self._key_of_digest(hexd)
        short_key = len(ref) >= 8 and all(c in "0123456789abcdef" for c in ref)
        # A short key is asked for as a tag only when the tag listing holds that name: on an OCI registry every
        # tag asked for that does not exist is a "manifest unknown" error in the registry's log.
        tag_may_exist = not short_key or ref in self._tag_names()
        if TAG_RE.fullmatch(ref) and tag_may_exist and self.backend.exists(f"refs/tags/{ref}"):
            key = self.backend.read_bytes(f"refs/tags/{ref}").decode().strip()
            if not KEY_RE.fullmatch(key):
                raise ManifestError(f"tag {ref} in {self.url} holds an invalid key")
            return key
        if short_key:
            hits = [k for k in self.keys() if k.startswith(ref)]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise UserInputError(f"key prefix {ref} is ambiguous in {self.url}", "give more characters")
        raise ArtifactNotFoundError(ref, self.url)

    def _key_of_digest(self, ref: str) -> str:
        """The entry key behind a 64-hex reference: itself, or (OCI) the key a manifest digest's entry records."""
        if not isinstance(self.backend, ResolvesManifestDigests):
            return ref
        return str(self.backend.key_of_manifest_digest(ref) or ref)

    def exists(self, key: str) -> bool:
        return self.backend.exists(manifest_path(key))

    def served_legacy(self, key: str) -> bool:
        """Whether entry ``key`` was served without a record, on its content annotation alone (--allow-legacy)."""
        return isinstance(self.backend, ChecksRecords) and key in self.backend.legacy_served

    def existing(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` the registry holds. Many keys: one listing of ``manifests/`` (a directory
        scan, one paginated LIST on S3: a request per 1,000 entries held) instead of one request per
        key; up to ``FEW_KEYS`` are checked one by one, which is cheaper than listing a large store."""
        wanted = {k for k in keys if k}
        if len(wanted) <= FEW_KEYS and not self.backend.lists_cheaply:
            return {k for k in wanted if self.exists(k)}
        return wanted.intersection(self.keys())

    def show(self, ref: str) -> EntryManifest:
        key = self.resolve(ref)
        try:
            raw = self.backend.read_bytes(manifest_path(key))
        except FileNotFoundError as exc:
            raise ArtifactNotFoundError(key, self.url) from exc
        m = parse_manifest(raw, f"{self.url}/{manifest_path(key)}")
        if m.key != key:
            raise ManifestError(f"manifest {key} names key {m.key}")
        return m

    def keys(self) -> list[str]:
        out = []
        for path, _, _ in self.backend.list("manifests/"):
            name = path.rsplit("/", 1)[-1]
            if name.endswith(".json") and KEY_RE.fullmatch(name[:-5]):
                out.append(name[:-5])
        return sorted(out)

    def _tag_names(self) -> set[str]:
        """The names of the tags the registry holds, from its listing alone (no tag is read)."""
        return {path.rsplit("/", 1)[-1] for path, _, _ in self.backend.list("refs/tags/")}

    def tags(self) -> dict[str, str]:
        out = {}
        for path, _, _ in self.backend.list("refs/tags/"):
            name = path.rsplit("/", 1)[-1]
            if not TAG_RE.fullmatch(name):
                continue
            with contextlib.suppress(FileNotFoundError, UnicodeDecodeError):
                out[name] = self.backend.read_bytes(path).decode().strip()
        return out

    def ls(self) -> list[EntryManifest]:
        return self.listing()[0]

    def listing(self) -> tuple[list[EntryManifest], list[tuple[str, str]]]:
        """Every entry the registry holds, and each manifest it holds but cannot read as an entry, as
        (name, why): an image index or a packed directory another client pushed to an OCI repository, a
        manifest file that does not parse. `cache ls` prints both."""
        out: list[EntryManifest] = []
        keys = self.keys()
        skipped = list(self.backend.unlisted())
        for k in keys:
            try:
                out.append(self.show(k))
            except ManifestError as e:
                skipped.append((k, e.message))
            except ArtifactNotFoundError:
                continue  # removed between the listing and this read
        return out, skipped

    def tag(self, ref: str, name: str) -> str:
        if not TAG_RE.fullmatch(name) or KEY_RE.fullmatch(name):
            raise UserInputError(f"tag name {name!r} is not allowed", "use letters, digits, '.', '_' or '-'")
        key = self.resolve(ref)
        if not self.exists(key):
            raise ArtifactNotFoundError(key, self.url)
        with self.backend.lock(exclusive=False):
            self.backend.write_bytes(f"refs/tags/{name}", key.encode())
        return key

    # --- put ----------------------------------------------------------------------------------

    def put(
        self,
        key: str | None,
        src: Path,
        *,
        kind: str = "engine",
        provenance: dict[str, Any] | None = None,
        force: bool = False,
        signer: Signer | None = None,
    ) -> EntryManifest:
        """Store every regular file under ``src`` as entry ``key`` (None: the digest of the content);
        blobs first, manifest last.

        Each file is read once: a local store copies it into place while hashing it; a remote one
        hashes it, then uploads only the blobs it lacks. A file whose stat signature (size, mtime,
        ctime, inode) is unchanged since it was last hashed is not read at all when its blob exists.
        The same content under an existing key is a no-op; different content is refused unless ``force``.
        A local push holds the store's lock shared from its first blob to its manifest, so gc waits for it.
        ``signer`` (else the key TOOLCHAIN_SIGNING_KEY names, loaded before anything is stored): the entry is
        signed as stored (``toolchain.registry.signing``).
        """
        from toolchain.registry.signing import current_subject, retire_signatures, sign_entry, signer_for

        signer = signer or signer_for(None)
        # the manifest a --force push replaces: its signatures are retired, so it cannot be rolled back to
        old = current_subject(self, key) if force and key is not None else None
        with self.backend.lock(exclusive=False):
            m = self._put(key, src, kind=kind, provenance=provenance, force=force)
        if old is not None and current_subject(self, m.key) != old:
            retire_signatures(self, m.key, old)
        if signer is not None:
            sign_entry(self, m.key, signer)
        return m

    def _put(
        self, key: str | None, src: Path, *, kind: str, provenance: dict[str, Any] | None, force: bool
    ) -> EntryManifest:
        if key is not None and not KEY_RE.fullmatch(key):
            raise UserInputError(f"key {key!r} is not 64 lowercase hex characters")
        src = Path(src)
        if not src.is_dir():
            raise UserInputError(f"{src} is not a directory", "push a directory of engine files")
        algo = self.backend.digest_algo or fastest_algo()
        stat_cache = self._src_cache if algo == "blake3" else shared_stat_cache(cache().statcache)
        found = _source_files(src)
        if not found:
            raise UserInputError(f"{src} holds no files")
        files: dict[str, FileEntry] = {}
        blobs: list[tuple[str, Path, str]] = []
        # a store that uploads while it hashes (OCI) meters the bytes itself as they are sent
        stage = f"hash+upload {src.name}" if self.backend.ingest_meters else f"hash {src.name}"
        # the content key is made of sha256 digests on every backend: a store that keeps another digest hashes
        # sha256 too, in the same read (or finds it in the sha256 stat cache)
        key_cache = shared_stat_cache(cache().statcache) if key is None and algo != KEY_ALGO else None
        key_files: dict[str, FileEntry] = {}
        with self._metered(stage, sum(st.st_size for _, _, st in found)) as moved:
            for rel, p, st in found:
                digest = stat_cache.lookup(p, st)
                key_digest = key_cache.lookup(p, st) if key_cache is not None else None
                if key_digest is not None and not key_digest.startswith(f"{KEY_ALGO}:"):
                    key_digest = None
                also = {KEY_ALGO: ""} if key_cache is not None and key_digest is None else None
                metered = False
                if digest is None or not self.backend.exists(blob_path(digest)):
                    ingested = self.backend.ingest(p, algo, blob_path, also)
                    metered = ingested is not None and self.backend.ingest_meters
                    if ingested is None and also is not None:
                        both = hash_file_as(p, (algo, KEY_ALGO))
                        ingested, also[KEY_ALGO] = both[algo], both[KEY_ALGO]
                    digest = ingested or hash_file(p, algo)
                    stat_cache.record(p, st, digest)
                    key_digest = key_digest or (also or {}).get(KEY_ALGO) or None
                if not metered:
                    moved(st.st_size)
                files[rel] = FileEntry(digest=digest, size=st.st_size, executable=bool(st.st_mode & 0o111))
                blobs.append((blob_path(digest), p, digest))
                if key_cache is not None:
                    if key_digest is None:  # the blob was there and the sha256 cache did not know the file
                        key_digest = hash_file(p, KEY_ALGO)
                    key_cache.record(p, st, key_digest)
                    key_files[rel] = files[rel].model_copy(update={"digest": key_digest})
        stat_cache.save()
        if key_cache is not None:
            key_cache.save()
        if key is None:
            key = content_key(files if key_cache is None else key_files)
        m = EntryManifest(
            key=key,
            kind=kind,
            files=files,
            provenance=provenance or {},
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        unique = list({b[0]: b for b in blobs}.values())
        replace = force
        if self.exists(key):
            try:
                old: EntryManifest | None = self.show(key)
            except ManifestError:
                old = None  # an unreadable manifest is replaced
            if old is not None and old.files == files:
                for bp, _, _ in unique:
                    self.backend.touch(bp)  # reused blobs are young again for gc's grace period
                return old  # the same content: nothing to do
            if old is not None and not force:
                raise _different_content(self.url, key, old)
            replace = True
        with self._metered(f"push {key[:12]}", sum(p.stat().st_size for _, p, _ in unique)):
            written = self.backend.put_entry(
                unique, manifest_path(key), m.model_dump_json(indent=2).encode(), replace=replace
            )
        if not written:  # another push created the entry since the check above: same content, or refused
            winner = self.show(key)
            if winner.files != files:
                raise _different_content(self.url, key, winner)
            return winner
        return m

    # --- get ----------------------------------------------------------------------------------

    def get(
        self,
        ref: str,
        dest: Path,
        *,
        force: bool = False,
        link: bool = False,
        verifier: Verifier | None = None,
        pin: str | None = None,
    ) -> EntryManifest:
        """Restore an entry into ``dest`` (must not exist unless ``force``), hashing every restored file.

        Local registries give independent copies (reflinks where the file system has them); ``link``
        hardlinks the read-only blobs instead (files with the executable bit are still copied).
        ``verifier``: the entry's signature must verify with that public key, checked before anything is
        written (``toolchain.registry.signing``), and a signed manifest older than the newest this machine has
        seen for the key is refused. ``pin``: the digest the entry's signed subject must have (``sha256:<hex>``).
        """
        m = self._signed_or_shown(ref, verifier, pin)
        dest = Path(dest).resolve()
        if dest.exists() and not force:
            if dest.is_dir() and not any(dest.iterdir()):
                dest.rmdir()
            else:
                raise UserInputError(f"{dest} already exists", "choose a new destination or pass --force")
        check_replaceable(dest, None, "the destination")
        with (
            staged_dir(dest) as tmp,
            self._metered(f"pull {m.key[:12]}", sum(f.size for f in m.files.values())) as moved,
        ):
            for rel, f in m.files.items():
                target = (tmp / rel).resolve()
                if tmp.resolve() not in target.parents:
                    raise ManifestError(f"manifest {m.key} path {rel!r} leaves the destination")
                target.parent.mkdir(parents=True, exist_ok=True)
                bp = blob_path(f.digest)
                local = self.backend.local_path(bp)
                algo = f.digest.split(":")[0]
                if local is not None:
                    if not local.is_file():
                        raise CorruptArtifactError(f"entry {m.key} in {self.url} lacks blob {f.digest} ({rel})")
                    got = self.backend.restore(bp, target, f.digest, link=link and not f.executable)
                else:
                    try:
                        got = self.backend.get_file(bp, target) or hash_file(target, algo)  # OCI hashes as it lands
                    except FileNotFoundError as exc:
                        raise CorruptArtifactError(
                            f"entry {m.key} in {self.url} lacks blob {f.digest} ({rel})"
                        ) from exc
                if got != f.digest or target.stat().st_size != f.size:
                    raise CorruptArtifactError(f"entry {m.key} in {self.url}: {rel} does not match its digest")
                if target.stat().st_nlink == 1:  # our own copy (a hardlink keeps the blob's read-only mode)
                    target.chmod(0o755 if f.executable else 0o644)
                if local is not None or not self.backend.streams_bytes:
                    moved(f.size)
        return m

    def _signed_or_shown(self, ref: str, verifier: Verifier | None, pin: str | None = None) -> EntryManifest:
        """The entry to restore; with a verifier (else the key TOOLCHAIN_VERIFY_KEY names: then every restore
        requires a signature) only from the record whose signature verifies; with ``pin`` only from the
        manifest of that digest."""
        from toolchain.registry.signing import pinned_entry, verified_entry, verifier_for

        verifier = verifier or verifier_for(None, require=False)
        if verifier is not None:
            return verified_entry(self, ref, verifier, pin=pin)
        if pin is not None:
            return pinned_entry(self, ref, pin)
        return self.show(ref)

    # --- verify and gc ------------------------------------------------------------------------

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Re-hash every blob of every entry (no stat-cache shortcut); optionally remove bad entries."""
        rep = VerifyReport()
        for key in self.keys():
            rep.checked += 1
            try:
                m = self.show(key)
            except ManifestError as e:
                rep.corrupt[key] = e.message
                continue
            for rel, f in m.files.items():
                bp = blob_path(f.digest)
                local = self.backend.local_path(bp)
                try:
                    if local is not None:
                        ok = local.is_file() and hash_file(local, f.digest.split(":")[0]) == f.digest
                    else:
                        with tempfile.TemporaryDirectory() as td:
                            got = self.backend.get_file(bp, Path(td) / "b")
                            ok = (got or hash_file(Path(td) / "b", f.digest.split(":")[0])) == f.digest
                except FileNotFoundError:
                    ok = False
                if not ok:
                    rep.corrupt[key] = f"{rel}: blob {f.digest} missing or corrupt"
                    if repair:  # without --repair, verify only reads
                        if local is not None and local.is_file():
                            local.chmod(0o644)
                        self.backend.delete(bp)
                    break
        if repair:
            for key in rep.corrupt:
                self.backend.delete(manifest_path(key))
                rep.removed.append(key)
        return rep

    def _referenced(self) -> set[str]:
        referenced: set[str] = set()
        for key in self.keys():
            with contextlib.suppress(ManifestError, ArtifactNotFoundError):
                referenced |= {blob_path(f.digest) for f in self.show(key).files.values()}
        return referenced

    def gc_plan(self, *, grace_s: float = GC_GRACE_S) -> GcPlan:
        """What gc would remove: unreferenced blobs older than ``grace_s``, temp files and unfinished
        multipart uploads older than ``grace_s`` (local temp files of any age once no push holds the store),
        and tags that point at nothing."""
        referenced = self._referenced()
        now = time.time()
        blobs = [(p, s) for p, s, mt in self.backend.list("blobs/") if p not in referenced and now - mt >= grace_s]
        tmp = [(p, s) for p, s, mt in self.backend.list("tmp/") if now - mt >= min(grace_s, 60.0)]
        tags = self.tags()
        dangling = [f"refs/tags/{t}" for t, k in tags.items() if not KEY_RE.fullmatch(k) or not self.exists(k)]
        uploads = self.backend.stale_uploads(grace_s)
        staging = sorted((str(p), size) for p, size in stale_staging())
        return GcPlan(sorted(blobs), dangling, sorted(tmp), uploads, grace_s, self.backend.gc_note, staging)

    def gc(self, plan: GcPlan, *, lock_timeout: float = 60.0) -> int:
        """Execute a plan, re-checking each blob first: one a push has referenced or touched since the plan
        was made is kept. Local registries run this with no push in progress (an exclusive lock), so every
        file left in tmp/ then belongs to a killed push and is removed."""
        freed = 0
        with self.backend.lock(exclusive=True, timeout=lock_timeout):
            referenced = self._referenced()
            now = time.time()
            for p, size in plan.blobs:
                mt = self.backend.mtime(p)
                if p in referenced or mt is None or now - mt < plan.grace_s:
                    continue
                self.backend.delete(p)
                freed += size
            tmp = list(self.backend.list("tmp/")) if self.backend.locks else [(p, s, 0.0) for p, s in plan.tmp]
            for p, size, _ in tmp:
                self.backend.delete(p)
                freed += size
            for key, upload_id in plan.uploads:
                self.backend.abort_upload(key, upload_id)
            # each re-checked under its lock: a directory a live run holds now is kept
            freed += remove_stale_staging([Path(p) for p, _ in plan.staging])
            current = self.tags()  # a tag re-pointed at a live entry since the plan was made is kept
            for p in plan.tags:
                k = current.get(p.removeprefix("refs/tags/"))
                if k is not None and KEY_RE.fullmatch(k) and self.exists(k):
                    continue
                self.backend.delete(p)
        return freed


def _different_content(url: str, key: str, old: EntryManifest) -> UserInputError:
    return UserInputError(
        f"{url} already holds entry {key[:16]} with different content "
        f"({len(old.files)} files, {old.total_size:,} bytes)",
        "pass --force to replace it, or push under another --key",
    )


def _source_files(src: Path) -> list[tuple[str, Path, os.stat_result]]:
    """(portable relative path, path, lstat) of every file under ``src``; links, special files and
    names an entry cannot hold are refused."""
    found: list[tuple[str, Path, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(src):
        for d in dirnames:
            if (Path(dirpath) / d).is_symlink():
                raise UserInputError(f"{Path(dirpath) / d} is a symlink", "the registry stores regular files only")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
                raise UserInputError(f"{p} is not a regular file", "the registry stores regular files only")
            try:
                rel = safe_relpath(p.relative_to(src).as_posix())
            except ValueError as e:
                raise UserInputError(
                    f"'{_printable(str(p)[:200])}': the file name cannot be stored ({e}); "
                    "entries hold portable relative paths only",
                    "rename the file (no backslashes or control characters), then push again",
                ) from e
            found.append((rel, p, st))
    return found


def open_registry(url: str | None, *, must_exist: bool = False, allow_legacy: bool = False) -> Registry:
    """The registry at ``url`` (the default local one when None); ``must_exist`` refuses a named local path
    that is not there instead of creating an empty registry (for commands that only read or tidy);
    ``allow_legacy``: see :class:`Registry`."""
    return Registry(open_backend(url, must_exist=must_exist), allow_legacy=allow_legacy)


def _printable(text: str) -> str:
    """``text`` on one line: control characters escaped, everything else (backslashes included) as is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def digest_hex(ref: str) -> str:
    """``sha256:<hex>`` / ``@sha256:<hex>`` (a digest reference) -> ``<hex>``; anything else unchanged."""
    bare = ref[1:] if ref.startswith("@") else ref
    if bare.startswith("sha256:") and KEY_RE.fullmatch(bare[len("sha256:") :]):
        return bare[len("sha256:") :]
    return ref


def key_for_push(ref: str, dest: Registry) -> str:
    """The full key a push stores under: a 64-hex key as given, or a short key (>= 8 hex) or tag that names an
    entry the destination or the local default registry already holds (e.g. copying a built engine to S3)."""
    ref = digest_hex(ref)
    if KEY_RE.fullmatch(ref):
        return ref
    places = [dest] if dest.url == open_registry(None).url else [dest, open_registry(None)]
    for reg in places:
        try:
            return reg.resolve(ref)
        except ArtifactNotFoundError:
            continue
    raise UserInputError(
        f"key {ref!r} is not a full 64-hex key and names no entry in {' or '.join(r.url for r in places)}",
        "give the full engine key (`toolchain spec expand SPEC --json` prints it), or omit --key to use the "
        "content digest",
    )


def entry_summary(m: EntryManifest, tags: dict[str, str]) -> dict[str, Any]:
    return {
        "key": m.key,
        "kind": m.kind,
        "files": len(m.files),
        "bytes": m.total_size,
        "created": m.created,
        "tags": sorted(t for t, k in tags.items() if k == m.key),
        "gpu": m.provenance.get("gpu", {}).get("name") if isinstance(m.provenance.get("gpu"), dict) else None,
    }
