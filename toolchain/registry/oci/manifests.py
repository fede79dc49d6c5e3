"""Manifests and tags of an ``oci://`` registry: read (its bytes checked against its digest), written, resolved,
listed; an entry's record blob checked against its manifest's layers (docs/oci-registry.md).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
from typing import Any
from urllib.parse import urljoin

from toolchain.errors import CorruptArtifactError, ManifestError, RegistryError
from toolchain.registry.manifest import KEY_RE, check_against_record, parse_manifest
from toolchain.registry.oci.blobs import Blobs, Tries
from toolchain.registry.oci.mapping import (
    A_CONTENT,
    A_KEY,
    A_RECORD,
    DOCKER_MANIFEST_MT,
    INDEX_MTS,
    MANIFEST_MT,
    MAX_MANIFEST,
    RECORD_MT,
    content_of,
    oci_to_entry,
)
from toolchain.registry.oci.transport import oci_error


class Manifests(Blobs):
    """The manifest half of the backend: GET/HEAD/PUT of manifests, the tags list, an entry's trusted record."""

    def _get_manifest(self, ref: str) -> tuple[dict[str, Any], str] | None:
        """(manifest, its digest) for a tag or digest, None when there is none."""
        accept = ", ".join((MANIFEST_MT, DOCKER_MANIFEST_MT, *INDEX_MTS))
        resp = self._request("GET", f"/manifests/{ref}", headers={"Accept": accept})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"GET of manifest {ref[:71]}")
        raw = resp.content
        if len(raw) > MAX_MANIFEST:
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is larger than {MAX_MANIFEST} bytes")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if ref.startswith("sha256:") and digest != ref:
            raise ManifestError(f"registry {self.host} served a manifest for {ref} whose bytes hash to {digest}")
        named = resp.headers.get("Docker-Content-Digest")
        if named and str(named).startswith("sha256:") and named != digest:
            raise ManifestError(
                f"registry {self.host} served manifest {ref[:71]} as {str(named)[:71]} but its bytes hash to "
                f"{digest}: it was changed in the registry's storage",
                "do not use this entry; push it again from a trusted copy, and ask the registry's operators",
            )
        try:
            m = json.loads(raw)
        except ValueError as e:
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is not JSON") from e
        if not isinstance(m, dict):
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is not a JSON object")
        return m, digest

    def _head_manifest(self, ref: str) -> str | None:
        """The digest a tag (or digest) names, None when absent."""
        accept = ", ".join((MANIFEST_MT, DOCKER_MANIFEST_MT, *INDEX_MTS))
        resp = self._request("HEAD", f"/manifests/{ref}", headers={"Accept": accept})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"HEAD of manifest {ref[:71]}")
        digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return str(digest)
        got = self._get_manifest(ref)
        return got[1] if got else None

    def _put_manifest(self, ref: str, m: dict[str, Any]) -> str:
        raw = json.dumps(m, separators=(",", ":"), sort_keys=True).encode()
        mt = str(m.get("mediaType") or MANIFEST_MT)
        tries = Tries()
        while True:
            resp = self._request("PUT", f"/manifests/{ref}", push=True, body=raw, headers={"Content-Type": mt})
            if resp.status_code in (200, 201):
                break
            # distribution checks each referenced blob when a manifest arrives; while another client commits
            # the same blob (concurrent pushes of one engine) it may answer DIGEST_INVALID or BLOB_UNKNOWN for
            # a blob that is whole a moment later: a short, bounded retry, then the registry's own error
            transient = resp.status_code == 400 and any(
                code in oci_error(resp) for code in ("DIGEST_INVALID", "BLOB_UNKNOWN")
            )
            if not transient or not tries.again():
                raise self._fail(resp, f"PUT of manifest {ref[:71]}", push=True)
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def _entry_ref(self, key: str) -> tuple[dict[str, Any], str] | None:
        """An entry's manifest: tagged by key, else (another client's artifact) by manifest digest."""
        got = self._get_manifest(key) or self._get_manifest(f"sha256:{key}")
        if got is None:
            self._check_api()
        return got

    def _entry_record(self, key: str) -> tuple[bytes, str] | None:
        """(the trusted entry JSON, the manifest's digest) of entry ``key``, None when there is none."""
        got = self._entry_ref(key)
        if got is None:
            return None
        where = f"{self.url}:{key[:16]}"
        by_key = got[1] != f"sha256:{key}"  # found by the key's tag, not by its own manifest digest
        return self._trusted(got[0], oci_to_entry(got[0], key, where), where, got[1], by_key), got[1]

    def key_of_manifest_digest(self, hexd: str) -> str | None:
        """The entry key a manifest digest reference names: the key the toolchain's manifest records, the
        digest itself for another client's artifact, None when the registry holds no such manifest (a
        64-hex key given in digest form is taken as the key it is)."""
        if self._head_manifest(hexd) is not None:  # a tag: the toolchain's key
            return hexd
        got = self._get_manifest(f"sha256:{hexd}")
        if got is None:
            return None
        ann = got[0].get("annotations") or {}
        key = ann.get(A_KEY) if isinstance(ann, dict) else None
        return str(key) if isinstance(key, str) and KEY_RE.fullmatch(key) else hexd

    def tag_names(self) -> builtins.list[str]:
        """Every tag of the repository (one request per page of the tags list; 404: no repository yet)."""
        out: list[str] = []
        url: str | None = "/tags/list"
        while url:
            resp = self._request("GET", url)
            if resp.status_code == 404 and "NAME_UNKNOWN" in oci_error(resp):
                return []
            if resp.status_code != 200:
                raise self._fail(resp, f"listing the tags of {self.repo}")
            try:
                tags = resp.json().get("tags") or []
            except (ValueError, AttributeError) as e:
                raise RegistryError(f"registry {self.host} answered the tags list with no JSON") from e
            out += [str(t) for t in tags]
            nxt = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', resp.headers.get("Link", ""))
            url = urljoin(str(resp.request.url), nxt.group(1)) if nxt else None
        return out

    allow_legacy = False  # the ChecksRecords capability (toolchain/registry/capabilities.py)
    legacy_served: set[str]  # set by the backend's __init__

    def _trusted(self, m: dict[str, Any], entry: dict[str, Any], where: str, digest: str, by_key: bool) -> bytes:
        """The entry JSON to trust for manifest ``m`` (whose digest is ``digest``; ``by_key``: found under a
        toolchain key's tag): its record blob, checked against every layer (title, digest, size, mode; no file
        missing or extra). A toolchain manifest without a record (pushed before records, or its record stripped)
        is refused unless ``allow_legacy``, then checked against its content annotation only. Another client's
        artifact has neither: it is served by its own digest, never under a toolchain key."""
        ann = m.get("annotations") or {}
        config = m.get("config")
        layers = [la for la in m.get("layers") or [] if isinstance(la, dict)]
        recs = [la for la in [config, *layers] if isinstance(la, dict) and la.get("mediaType") == RECORD_MT]
        if A_RECORD not in ann and not recs:
            if A_KEY not in ann:
                if not by_key:
                    return json.dumps(entry).encode()
                raise ManifestError(
                    f"{where} is not a toolchain entry: its tag names another client's artifact {digest}",
                    f"pull that artifact by its own digest (`toolchain cache pull {digest} DIR`), or push the "
                    "entry again from a trusted copy",
                )
            if not self.allow_legacy:
                raise ManifestError(
                    f"{where} carries no record (pushed before records, or the record was stripped from it)",
                    "push the entry again from a trusted copy (`toolchain cache push DIR --key KEY --force`), "
                    "or pass --allow-legacy to trust its content annotation alone",
                )
            files = entry.get("files") or {}
            if ann.get(A_CONTENT) != content_of(files):
                raise ManifestError(
                    f"{where}: the manifest's layers differ from the content it records "
                    "(a layer retitled, swapped or dropped)",
                    "do not use this entry; push it again from a trusted copy",
                )
            self.legacy_served.add(str(entry.get("key")))
            return json.dumps(entry).encode()
        if len(recs) != 1 or recs[0] is not config or recs[0].get("digest") != ann.get(A_RECORD):
            raise ManifestError(
                f"{where}: the manifest's record (its config) and its {A_RECORD} annotation disagree",
                "do not use this entry; push it again from a trusted copy",
            )
        record_digest = str(recs[0].get("digest"))
        raw = self.record_bytes(record_digest)
        if len(raw) != recs[0].get("size"):
            raise ManifestError(f"{where}: the manifest gives the record another size", "push the entry again")
        record = parse_manifest(raw, where)
        key = str(entry.get("key"))
        if record.key != key:
            raise ManifestError(f"{where}: the record is of entry {record.key[:16]}, not {key[:16]}")
        check_against_record(record, entry.get("files") or {}, where)
        return raw

    def record_bytes(self, digest: str) -> bytes:
        """A record blob's bytes, refused unless they hash to ``digest``."""
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ManifestError(f"record digest {digest[:80]!r} in {self.url} is not a sha256 digest")
        resp = self._request("GET", f"/blobs/{digest}")
        if resp.status_code == 404:
            raise CorruptArtifactError(f"{self.url} lacks the record blob {digest[:19]}", "push the entry again")
        if resp.status_code != 200:
            raise self._fail(resp, f"GET of record blob {digest[:19]}")
        raw = bytes(resp.content)
        if len(raw) > MAX_MANIFEST or "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise ManifestError(
                f"the record blob {digest[:19]} in {self.url} does not match its digest",
                "do not use this entry; push it again from a trusted copy",
            )
        return raw
