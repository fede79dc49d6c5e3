"""Registry entry manifests, validated before anything is trusted."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolchain.errors import ManifestError

KEY_RE = re.compile(r"^[0-9a-f]{64}$")
DIGEST_RE = re.compile(r"^(sha256|blake3):[0-9a-f]{64}$")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")


def safe_relpath(p: str) -> str:
    """Refuse absolute paths, '..', empty parts, backslashes and control characters."""
    if not p or p.startswith("/") or "\\" in p or any(ord(c) < 32 for c in p):
        raise ValueError(f"unsafe path {p!r}")
    parts = PurePosixPath(p).parts
    if any(part in ("..", ".", "") for part in parts) or PurePosixPath(p).as_posix() != p:
        raise ValueError(f"unsafe path {p!r}")
    return p


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    digest: str
    size: int = Field(ge=0)
    executable: bool = False

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str) -> str:
        if not DIGEST_RE.match(v):
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
        if not KEY_RE.match(v):
            raise ValueError(f"bad key {v!r} (want 64 lowercase hex)")
        return v

    @field_validator("files")
    @classmethod
    def _files(cls, v: dict[str, FileEntry]) -> dict[str, FileEntry]:
        if not v:
            raise ValueError("an entry needs at least one file")
        for p in v:
            safe_relpath(p)
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
        raise ManifestError(f"manifest {where} is invalid: {loc}: {first['msg']}") from e
