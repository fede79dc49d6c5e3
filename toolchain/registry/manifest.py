"""Registry entry manifests, validated before anything is trusted."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolchain.errors import ManifestError

# Matched with fullmatch: ``$`` would accept a trailing newline (``manifests/<hex>\n.json``).
KEY_RE = re.compile(r"[0-9a-f]{64}")
DIGEST_RE = re.compile(r"(sha256|blake3):[0-9a-f]{64}")
TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")

# File-system limits a restored path must fit (Linux NAME_MAX and PATH_MAX).
NAME_MAX = 255
PATH_MAX = 4096
MAX_FILES = 100_000


def blob_path(digest: str) -> str:
    """Where a blob lives in a registry: ``blobs/<algo>/<hh>/<hex>``."""
    algo, hexd = digest.split(":", 1)
    return f"blobs/{algo}/{hexd[:2]}/{hexd}"


def manifest_path(key: str) -> str:
    """Where an entry's manifest (its record) lives in a registry."""
    return f"manifests/{key}.json"


def safe_relpath(p: str) -> str:
    """Refuse absolute paths, '..', empty parts, backslashes, control characters and over-long names."""
    shown = repr(p[:80] + ("..." if len(p) > 80 else ""))
    if not p or p.startswith("/") or "\\" in p or any(ord(c) < 32 or ord(c) == 127 for c in p):
        raise ValueError(f"unsafe path {shown}")
    parts = PurePosixPath(p).parts
    if any(part in ("..", ".", "") for part in parts) or PurePosixPath(p).as_posix() != p:
        raise ValueError(f"unsafe path {shown}")
    if len(p.encode("utf-8", "surrogateescape")) > PATH_MAX or any(
        len(part.encode("utf-8", "surrogateescape")) > NAME_MAX for part in parts
    ):
        raise ValueError(f"path {shown} is longer than the file system allows ({NAME_MAX} bytes a name)")
    return p


def conflicting_paths(paths: list[str]) -> str | None:
    """A path that is also used as a directory of another (``a`` and ``a/b``), which no restore can create."""
    files = set(paths)
    for p in paths:
        parts = p.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                return "/".join(parts[:i])
    return None


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    digest: str
    size: int = Field(ge=0)
    executable: bool = False

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str) -> str:
        if not DIGEST_RE.fullmatch(v):
            raise ValueError(f"bad digest {v!r}")
        return v


class EntryManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int = 1
    key: str
    kind: str = "engine"
    files: dict[str, FileEntry]
    provenance: dict[str, Any] = Field(default_factory=dict)
    created: str

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not KEY_RE.fullmatch(v):
            raise ValueError(f"bad key {v!r} (want 64 lowercase hex)")
        return v

    @field_validator("files")
    @classmethod
    def _files(cls, v: dict[str, FileEntry]) -> dict[str, FileEntry]:
        if not v:
            raise ValueError("an entry needs at least one file")
        if len(v) > MAX_FILES:
            raise ValueError(f"more than {MAX_FILES} files")
        for p in v:
            safe_relpath(p)
        clash = conflicting_paths(list(v))
        if clash is not None:
            raise ValueError(f"{clash[:80]!r} is both a file and a directory")
        return v

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files.values())


def parse_manifest(raw: bytes, where: str) -> EntryManifest:
    try:
        return EntryManifest.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        loc = loc if len(loc) <= 100 else loc[:97] + "..."
        msg = str(first["msg"]).splitlines()[0][:200] if first["msg"] else "invalid"
        raise ManifestError(f"manifest {where} is invalid: {loc!r}: {msg}") from e


def check_against_record(record: EntryManifest, files: dict[str, Any], where: str) -> None:
    """Refuse a listing (``path -> {digest, size, executable}``, from a backend's own manifest) that differs
    from the entry's record in any file: missing, extra, another digest, size or mode."""
    hint = "do not use this entry; push it again from a trusted copy"
    for rel in sorted(set(record.files) | set(files)):
        shown = repr(rel[:80])
        if rel not in files:
            raise ManifestError(f"{where}: {shown} is in the entry's record but not in its manifest", hint)
        if rel not in record.files:
            raise ManifestError(f"{where}: {shown} is in the manifest but not in the entry's record", hint)
        got, want = files[rel], record.files[rel]
        if not isinstance(got, dict):
            raise ManifestError(f"{where}: {shown} has no digest in the manifest", hint)
        for name, value in (("digest", want.digest), ("size", want.size), ("executable", want.executable)):
            if got.get(name) != value:
                raise ManifestError(f"{where}: {shown} has another {name} in the manifest than in the record", hint)
