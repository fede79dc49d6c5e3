"""``oci://host[:port]/repository``: the engine registry in an OCI registry (docs/oci-registry.md).

The package's modules, each on top of the one before:

    mapping      entry ⇄ OCI image manifest: media types, annotations, the two translations (no I/O)
    transport    the URL, one HTTP client, credentials and auth, what a failed answer means
    blobs        HEAD, resumable download, chunked upload sessions; one rule for trying a transfer again
    manifests    manifests and tags: read, written, listed; an entry's record checked against its layers
    signatures   cosign signature manifests (where signatures are kept, not how they are made)
    backend      :class:`OCIBackend`, the registry's ``Backend`` interface over all of the above

Other modules import only the names below; the rest is the package's own. ``POLICY`` is the transport's retry
policy object, named here for callers that read it; to change the policy in a test, patch
``toolchain.registry.oci.transport.POLICY``, which every module of the package reads when it sends.
"""

from toolchain.registry.oci.backend import OCIBackend
from toolchain.registry.oci.transport import POLICY, parse_oci_url

__all__ = ["POLICY", "OCIBackend", "parse_oci_url"]
