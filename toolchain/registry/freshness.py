"""What this machine has seen of signed entries: per registry, entry key and signer, the newest signature
sequence and the digest it signed, pushed or pulled through this cache (docs/signing.md "Freshness").

A signed manifest older than the newest seen is a rollback (a tag re-pointed at an older, once-signed
manifest, or a registry restored from a backup): ``toolchain.registry.signing`` refuses it. The idea is
TUF's timestamp role, kept on the client: the signer's sequence only grows, and the client remembers it.
The record is ``$TOOLCHAIN_CACHE/trust/seen.json``, rewritten atomically under a lock file beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolchain.artifacts.layout import cache
from toolchain.digest import atomic_write_text


@dataclass(frozen=True)
class Seen:
    sequence: int
    subject: str  # the digest the signature of that sequence named


def _path() -> Path:
    return cache().signatures_seen


def _load(path: Path) -> dict[str, dict[str, object]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _id(registry: str, key: str, signer: str) -> str:
    return f"{registry}#{key}#{signer}"


def seen(registry: str, key: str, signer: str) -> Seen | None:
    """The newest manifest of ``key`` in ``registry`` signed by ``signer`` (a public key's fingerprint) that
    this machine has seen; None before the first."""
    got = _load(_path()).get(_id(registry, key, signer))
    if not isinstance(got, dict):
        return None
    seq, subject = got.get("sequence"), got.get("subject")
    if not isinstance(seq, int) or not isinstance(subject, str):
        return None
    return Seen(seq, subject)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def record(registry: str, key: str, signer: str, sequence: int, subject: str) -> None:
    """Remember ``signer``'s ``sequence`` (signing ``subject``) for ``key`` unless a newer one is remembered."""
    path = _path()
    with _locked(path):
        doc = _load(path)
        old = doc.get(_id(registry, key, signer))
        if isinstance(old, dict) and isinstance(old.get("sequence"), int) and int(str(old["sequence"])) >= sequence:
            return
        doc[_id(registry, key, signer)] = {"sequence": sequence, "subject": subject}
        atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True))
