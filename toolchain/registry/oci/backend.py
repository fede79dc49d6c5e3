"""``oci://host[:port]/repository``: the engine registry in an OCI registry, over the distribution API.

The registry's object paths map onto OCI as follows (docs/oci-registry.md has the layout and its sources):

    blobs/sha256/<hh>/<hex>   the blob ``sha256:<hex>`` of the repository (HEAD, GET with Range, chunked upload)
    manifests/<key>.json      the image manifest tagged ``<key>``, read back as the registry's entry manifest;
                              an artifact another client pushed is also found by its manifest digest
    refs/tags/<name>          the OCI tag ``<name>``: a manifest with the entry's layers and ``dev.toolchain.tag``

Only sha256 blobs exist here, so entries in an OCI registry are hashed with sha256. A push streams each file
to an upload session in chunks while it hashes them (one read) and closes the session with the digest; a
file small enough to hold in memory is hashed first, so a blob the registry has is never sent. The manifest
is written last, so a tag appears only for a complete entry.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from toolchain.errors import CorruptArtifactError, ManifestError, RegistryError
from toolchain.registry.backends import Backend
from toolchain.registry.manifest import KEY_RE, TAG_RE
from toolchain.registry.oci.blobs import SMALL
from toolchain.registry.oci.mapping import (
    A_KEY,
    A_TAG,
    COSIGN_TAG_RE,
    EMPTY_DATA,
    EMPTY_DIGEST,
    OCI_TAG_RE,
    entry_to_oci,
)
from toolchain.registry.oci.signatures import Signatures

GC_NOTE = (
    "an OCI registry has no listing of blobs: unreferenced blobs (a killed push's, a deleted entry's) are "
    "reclaimed by the registry's own garbage collector (distribution: `registry garbage-collect "
    "--delete-untagged CONFIG`; Harbor: its GC job; ECR/GCR: lifecycle policies)"
)


class OCIBackend(Signatures, Backend):
    """An OCI repository as the registry's store (see the module docstring)."""

    streams_bytes = True
    ingest_meters = True
    lists_cheaply = True  # one tags list answers "which keys are here"
    digest_algo = "sha256"
    gc_note = GC_NOTE

    def __init__(self, host: str, repo: str, *, client: Any = None) -> None:
        super().__init__(host, repo, client=client)
        self._unlisted: list[tuple[str, str]] = []  # what the last listing of manifests/ could not read
        self._config_pushed = False
        self.legacy_served: set[str] = set()  # the ChecksRecords capability (toolchain/registry/capabilities.py)

    # --- the Backend interface -----------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        if path.startswith("manifests/") and path.endswith(".json"):
            return "manifest", path[len("manifests/") : -len(".json")]
        if path.startswith("refs/tags/"):
            return "tag", path[len("refs/tags/") :]
        return "other", path

    def exists(self, path: str) -> bool:
        digest = self._digest_of(path)
        if digest is not None:
            return self.blob_exists(digest)
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            if self._head_manifest(name) is not None or self._head_manifest(f"sha256:{name}") is not None:
                return True
            self._check_api()
            return False
        if kind == "tag" and TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            return self._head_manifest(name) is not None
        return False

    def read_bytes(self, path: str) -> bytes:
        digest = self._digest_of(path)
        if digest is not None:
            resp = self._request("GET", f"/blobs/{digest}")
            if resp.status_code == 404:
                raise FileNotFoundError(path)
            if resp.status_code != 200:
                raise self._fail(resp, f"GET of blob {digest[:19]}")
            return bytes(resp.content)
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            trusted = self._entry_record(name)
            if trusted is None:
                raise FileNotFoundError(path)
            return trusted[0]
        if kind == "tag" and TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            got = self._get_manifest(name)
            if got is None:
                raise FileNotFoundError(path)
            ann = got[0].get("annotations") or {}
            return str(ann.get(A_KEY) or got[1].split(":", 1)[1]).encode()
        raise FileNotFoundError(path)

    def _ensure_config(self) -> None:
        if not self._config_pushed:
            if not self.blob_exists(EMPTY_DIGEST):
                self.upload_bytes(EMPTY_DATA, EMPTY_DIGEST)
            self._config_pushed = True

    def _write_entry(self, key: str, data: bytes) -> str:
        try:
            entry = json.loads(data)
        except ValueError as e:
            raise ManifestError(f"entry {key[:16]} is not JSON") from e
        record = "sha256:" + hashlib.sha256(data).hexdigest()
        self._ensure_config()
        if not self.blob_exists(record):
            self.upload_bytes(data, record)
        m = entry_to_oci(entry, (record, len(data)))
        return self._put_manifest(key, m)

    def write_bytes(self, path: str, data: bytes) -> None:
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            self._write_entry(name, data)
            return
        if kind == "tag" and OCI_TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            key = data.decode().strip()
            got = self._entry_ref(key)
            if got is None:
                raise FileNotFoundError(f"manifests/{key}.json")
            m = dict(got[0])
            ann = dict(m.get("annotations") or {})
            ann.setdefault(A_KEY, key)
            ann[A_TAG] = name  # a manifest of its own: deleting the tag never deletes the entry (module doc)
            m["annotations"] = ann
            self._put_manifest(name, m)
            return
        raise RegistryError(
            f"{path} cannot be written in an OCI registry (blobs are named by their content)",
            "push entries with `toolchain cache push`",
        )

    def write_new(self, path: str, data: bytes) -> bool:
        """Create an entry's tag unless it exists. OCI has no create-only PUT: the tag is checked before and
        after, and a push that finds another manifest there afterwards reports that it lost (a narrow race
        remains in which both succeed and the later one stands)."""
        kind, name = self._split(path)
        if kind != "manifest":
            return super().write_new(path, data)
        if self._head_manifest(name) is not None:
            return False
        ours = self._write_entry(name, data)
        return self._head_manifest(name) == ours

    def put_file(self, path: str, src: Path, digest: str) -> None:
        want = self._digest_of(path)
        if want is None or want != digest:
            raise RegistryError(f"{path}: an OCI registry holds sha256 blobs only")
        if self.blob_exists(digest):
            if self.meter is not None:
                self.meter(src.stat().st_size)
            return
        size = src.stat().st_size
        if size <= SMALL:
            data = src.read_bytes()
            got = "sha256:" + hashlib.sha256(data).hexdigest()
            if got == digest:
                self.upload_bytes(data, digest)
                if self.meter is not None:
                    self.meter(size)
        else:
            got, _ = self.upload_stream(src)
        if got != digest:
            raise CorruptArtifactError(
                f"{src} changed while it was being stored ({got} != {digest})",
                "make sure nothing writes to the directory during push",
            )

    def ingest(
        self, src: Path, algo: str, path_of: Callable[[str], str], also: dict[str, str] | None = None
    ) -> str | None:
        """Hash ``src`` in the read that uploads it: a small file is hashed, HEADed and sent only when the
        registry lacks it; a large one streams to an upload session while it is hashed. (Only sha256, the
        registry's digest: ``also`` is left as it is.)"""
        if algo != "sha256":
            return None
        size = src.stat().st_size
        if size <= SMALL:
            data = src.read_bytes()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            if not self.blob_exists(digest):
                self.upload_bytes(data, digest)
            if self.meter is not None:
                self.meter(len(data))
            return digest
        digest, _ = self.upload_stream(src)
        return digest

    def put_entry(
        self, blobs: builtins.list[tuple[str, Path, str]], manifest_path: str, manifest: bytes, *, replace: bool = True
    ) -> bool:
        self._ensure_config()
        return super().put_entry(blobs, manifest_path, manifest, replace=replace)

    def unlisted(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._unlisted)

    def get_file(self, path: str, dest: Path) -> str:
        digest = self._digest_of(path)
        if digest is None:
            raise FileNotFoundError(path)
        return self.download(digest, dest)

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        if prefix == "manifests/":
            tags = self.tag_names()
            keys = {t for t in tags if KEY_RE.fullmatch(t)}
            for t in sorted(keys):
                yield f"manifests/{t}.json", 0, 0.0
            # another client's artifact (ORAS, a CI job) is only tagged by name: listed by its manifest digest
            self._unlisted = []
            for t in tags:
                if t in keys or not TAG_RE.fullmatch(t) or COSIGN_TAG_RE.fullmatch(t):
                    continue
                try:
                    got = self._get_manifest(t)
                except (RegistryError, ManifestError, CorruptArtifactError) as e:
                    self._unlisted.append((f"tag {t}", e.message))
                    continue
                if got is None:
                    continue  # untagged between the tags list and this read
                ann = got[0].get("annotations") or {}
                if not isinstance(ann, dict):
                    self._unlisted.append((f"tag {t}", "its manifest's annotations are not a string map"))
                    continue
                if A_KEY in ann:
                    continue  # the toolchain's own entries are listed by their key tags
                hexd = got[1].split(":", 1)[1]
                if hexd not in keys:
                    keys.add(hexd)
                    yield f"manifests/{hexd}.json", 0, 0.0
        elif prefix == "refs/tags/":
            for t in self.tag_names():
                if TAG_RE.fullmatch(t) and not KEY_RE.fullmatch(t) and not COSIGN_TAG_RE.fullmatch(t):
                    yield f"refs/tags/{t}", 0, 0.0
        # blobs/ and tmp/: the distribution API lists neither (GC_NOTE)

    def delete(self, path: str) -> None:
        digest = self._digest_of(path)
        if digest is not None:
            self._delete(f"/blobs/{digest}", f"deleting blob {digest[:19]}")
            return
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            d = self._head_manifest(name) or self._head_manifest(f"sha256:{name}")
            if d is not None:
                self._delete(f"/manifests/{d}", f"deleting entry {name[:16]}")
            return
        if kind == "tag":
            d = self._head_manifest(name)
            if d is None:
                return
            resp = self._request("DELETE", f"/manifests/{name}", push=True)  # tag deletion (distribution-spec 1.1)
            if resp.status_code in (202, 404):
                return
            # no tag deletion (distribution 2.x): delete the tag's own manifest, unless an entry uses it too
            key = self.read_bytes(path).decode()
            if KEY_RE.fullmatch(key) and self._head_manifest(key) == d:
                raise RegistryError(
                    f"tag {name} in {self.url} shares its manifest with entry {key[:16]}, and this registry "
                    "deletes a tag only with its manifest",
                    f"re-point the tag with `toolchain cache tag {key[:12]} {name}` first",
                )
            self._delete(f"/manifests/{d}", f"deleting tag {name}")
            return
        raise FileNotFoundError(path)

    def _delete(self, url: str, what: str) -> None:
        resp = self._request("DELETE", url, push=True)
        if resp.status_code not in (200, 202, 404):
            raise self._fail(resp, what, push=True)

    def mtime(self, path: str) -> float | None:
        return 0.0 if self.exists(path) else None
