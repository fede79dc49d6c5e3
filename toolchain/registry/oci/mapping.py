"""Entry ⇄ OCI image manifest: the media types and annotations of the toolchain's artifact, and the two pure
translations between the registry's entry JSON and an OCI image manifest (docs/oci-registry.md has the layout).

Nothing here sends a request: :mod:`toolchain.registry.oci.manifests` reads and writes the manifests, and checks a
manifest against its record blob.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from toolchain.digest import canonical_json, sha256_text
from toolchain.errors import ManifestError, RegistryError

MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_MT = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MTS = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
ARTIFACT_TYPE = "application/vnd.toolchain.engine.v1"
FILE_MT = "application/vnd.toolchain.engine.file.v1"
RECORD_MT = "application/vnd.toolchain.record.v1+json"  # the toolchain's own record of an entry: the config blob
EMPTY_DATA = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_DATA).hexdigest()
EMPTY: dict[str, Any] = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": EMPTY_DIGEST,
    "size": len(EMPTY_DATA),
}
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
A_KEY = "dev.toolchain.key"
A_CONTENT = "dev.toolchain.content"
A_KIND = "dev.toolchain.kind"
A_SCHEMA = "dev.toolchain.schema"
A_PROVENANCE = "dev.toolchain.provenance"
A_TAG = "dev.toolchain.tag"
A_EXEC = "dev.toolchain.executable"
A_RECORD = "dev.toolchain.record"
ORAS_UNPACK = "io.deis.oras.content.unpack"

MAX_MANIFEST = 4 * 2**20  # distribution's default manifest size limit

OCI_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
# cosign's tag-based discovery (specs/SIGNATURE_SPEC.md): signatures, attestations and SBOMs of a manifest
# digest; they are not entries or toolchain tags (docs/signing.md)
COSIGN_TAG_RE = re.compile(r"sha256-[0-9a-f]{64}\.(?:sig|att|sbom)")


def entry_to_oci(entry: dict[str, Any], record: tuple[str, int] | None = None) -> dict[str, Any]:
    """An entry manifest (the registry's JSON) as an OCI image manifest of the toolchain's artifact type;
    ``record`` (digest, size): the blob holding that JSON, referenced as the manifest's config (which ORAS
    and other clients never restore as a file) and by the ``dev.toolchain.record`` annotation."""
    files: dict[str, dict[str, Any]] = entry.get("files") or {}
    layers = []
    for rel, f in sorted(files.items()):
        digest = str(f.get("digest", ""))
        if not digest.startswith("sha256:"):
            raise RegistryError(
                f"entry {str(entry.get('key'))[:16]} has {digest.split(':')[0]} digests; an OCI registry holds sha256",
                "push the engine directory itself to the oci:// registry (`toolchain cache push DIR --registry oci://...`)",
            )
        ann = {TITLE: rel}
        if f.get("executable"):
            ann[A_EXEC] = "true"
        layers.append({"mediaType": FILE_MT, "digest": digest, "size": int(f.get("size", 0)), "annotations": ann})
    extra: dict[str, str] = {}
    config = dict(EMPTY)
    if record is not None:
        config = {"mediaType": RECORD_MT, "digest": record[0], "size": record[1]}
        extra[A_RECORD] = record[0]
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MT,
        "artifactType": ARTIFACT_TYPE,
        "config": config,
        "layers": layers,
        "annotations": {
            **extra,
            CREATED: str(entry.get("created", "")),
            A_KEY: str(entry.get("key", "")),
            A_CONTENT: content_of(files),
            A_KIND: str(entry.get("kind", "engine")),
            A_SCHEMA: str(entry.get("schema_version", 1)),
            A_PROVENANCE: canonical_json(entry.get("provenance") or {}),
        },
    }


def oci_to_entry(m: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """An OCI image manifest as the registry's entry JSON (validated afterwards by ``parse_manifest``).

    Each layer with ``org.opencontainers.image.title`` is a file at that path (ORAS's layout); layers
    without a title are not files (ORAS skips them too). An artifact pushed by another client gets
    ``key`` (its tag or manifest digest) and kind ``artifact``; its annotations are kept as provenance."""
    if m.get("mediaType") in INDEX_MTS or "manifests" in m:
        raise ManifestError(f"{where} is an image index, not an artifact manifest", "pull one of its manifests")
    layers = m.get("layers")
    if not isinstance(layers, list):
        raise ManifestError(f"{where} has no layers list")
    ann = m.get("annotations") or {}
    if not isinstance(ann, dict):
        raise ManifestError(f"{where} has annotations that are not a string map")
    files: dict[str, dict[str, Any]] = {}
    for layer in layers:
        la = (layer.get("annotations") if isinstance(layer, dict) else None) or {}
        title = la.get(TITLE)
        if not title:
            continue
        if str(la.get(ORAS_UNPACK, "")).lower() == "true":
            raise ManifestError(
                f"{where}: layer {str(title)[:80]!r} is a packed directory (ORAS `push DIR`), not a file",
                "push the directory's files one by one (`oras push REF dir/*` or `toolchain cache push DIR`)",
            )
        if title in files:
            raise ManifestError(f"{where}: two layers are titled {str(title)[:80]!r}")
        files[str(title)] = {
            "digest": layer.get("digest"),
            "size": layer.get("size"),
            "executable": str(la.get(A_EXEC, "")).lower() == "true",
        }
    ours = A_KEY in ann
    try:
        provenance = json.loads(ann[A_PROVENANCE]) if A_PROVENANCE in ann else {}
        schema = int(ann.get(A_SCHEMA, 1))
    except (ValueError, TypeError) as e:
        raise ManifestError(f"{where} has unreadable toolchain annotations") from e
    if not ours:
        provenance = {"oci": {"artifactType": m.get("artifactType"), "annotations": ann}}
    return {
        "schema_version": schema,
        "key": ann.get(A_KEY, key),
        "kind": ann.get(A_KIND, "engine" if ours else "artifact"),
        "files": files,
        "provenance": provenance,
        "created": str(ann.get(CREATED, "")),
    }


def content_of(files: dict[str, Any]) -> str:
    """The ``dev.toolchain.content`` annotation of an entry's files: the digest of its (path, digest, mode) listing."""
    listing = {rel: [f.get("digest"), bool(f.get("executable"))] for rel, f in sorted(files.items())}
    return "sha256:" + sha256_text(canonical_json(listing))
