"""Signatures of entries in an ``oci://`` registry, stored the way cosign stores them (docs/signing.md): a signature
manifest tagged ``sha256-<manifest hex>.sig`` whose layers are the signed payloads, each with its base64 signature
in the ``dev.cosignproject.cosign/signature`` annotation. Signing and checking are ``toolchain.registry.signing``'s;
this is only where the signatures are kept (the ``StoresSignatures`` capability, toolchain/registry/capabilities.py).
"""

from __future__ import annotations

import builtins
import hashlib
import re

from toolchain.digest import canonical_json
from toolchain.errors import CorruptArtifactError, ManifestError
from toolchain.registry.oci.manifests import Manifests
from toolchain.registry.oci.mapping import MANIFEST_MT

SIG_CONFIG_MT = "application/vnd.oci.image.config.v1+json"


class Signatures(Manifests):
    """The signature half of the backend: the cosign signature manifest of an entry's manifest digest."""

    def signed_subject(self, key: str) -> tuple[bytes, str]:
        """(the entry's trusted record bytes, the digest of the manifest they came with), from one GET:
        the digest a cosign signature of this entry names."""
        got = self._entry_record(key)
        if got is None:
            from toolchain.errors import ArtifactNotFoundError

            raise ArtifactNotFoundError(key, self.url)
        return got

    def read_signatures(self, subject: str) -> builtins.list[tuple[bytes, str]]:
        """Every (payload, base64 signature) of the cosign signature manifest ``sha256-<hex>.sig``."""
        from toolchain.registry.signing import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MT

        got = self._get_manifest(subject.replace(":", "-") + ".sig")
        if got is None:
            return []
        out = []
        for layer in got[0].get("layers") or []:
            if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING_MT:
                continue
            sig = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
            digest = str(layer.get("digest", ""))
            if isinstance(sig, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                try:
                    out.append((self.record_bytes(digest), sig))  # its bytes checked against the digest
                except (CorruptArtifactError, ManifestError):
                    continue  # a payload missing or altered: no signature from this layer
        return out

    def write_signature(self, subject: str, payload: bytes, sig: str) -> None:
        """Add a signature layer to the cosign signature manifest of ``subject`` (created when absent); the
        layers of other signers are kept."""
        from toolchain.registry.signing import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MT

        tag = subject.replace(":", "-") + ".sig"
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        if not self.blob_exists(digest):
            self.upload_bytes(payload, digest)
        got = self._get_manifest(tag)
        layers = [la for la in (got[0].get("layers") or []) if isinstance(la, dict)] if got else []
        # one layer per signer: two signers of one entry sign the same payload (one blob, two annotations)
        layers = [la for la in layers if (la.get("annotations") or {}).get(SIGNATURE_ANNOTATION) != sig]
        layers.append(
            {
                "mediaType": SIMPLE_SIGNING_MT,
                "digest": digest,
                "size": len(payload),
                "annotations": {SIGNATURE_ANNOTATION: sig},
            }
        )
        # the image config cosign writes for a signature image: its rootfs lists the payload layers
        config = canonical_json(
            {
                "architecture": "",
                "config": {},
                "created": "0001-01-01T00:00:00Z",
                "history": [{"created": "0001-01-01T00:00:00Z"}],
                "os": "",
                "rootfs": {"type": "layers", "diff_ids": [str(la.get("digest")) for la in layers]},
            }
        ).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        if not self.blob_exists(config_digest):
            self.upload_bytes(config, config_digest)
        m = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MT,
            "config": {"mediaType": SIG_CONFIG_MT, "digest": config_digest, "size": len(config)},
            "layers": layers,
        }
        self._put_manifest(tag, m)

    def drop_signatures(self, subject: str) -> None:
        """Delete the cosign signature manifest of ``subject`` (a manifest the entry no longer is)."""
        tag = subject.replace(":", "-") + ".sig"
        d = self._head_manifest(tag)
        if d is None:
            return
        resp = self._request("DELETE", f"/manifests/{d}", push=True)
        if resp.status_code not in (200, 202, 404):
            raise self._fail(resp, f"deleting the signatures of {subject[:19]}", push=True)
