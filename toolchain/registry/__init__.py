"""Content-addressed engine registry over a local directory, S3 or the Hugging Face Hub.

Layout (identical on every backend; ``tests/registry/test_layout.py`` holds it):

    blobs/<algo>/<hh>/<hex>      file contents named by digest (algo: blake3 or sha256); read-only
    manifests/<key>.json         one per entry: files {relpath: {digest, size, executable}},
                                 kind, provenance (GPU, driver, CUDA, TensorRT, TensorRT-LLM,
                                 container, spec, command, build time), created
    manifests/<key>.sig          optional: signatures of the entry's record (docs/signing.md; on OCI
                                 a cosign signature manifest tagged sha256-<manifest hex>.sig instead)
    refs/tags/<name>             text file holding an entry key
    tmp/                         local backend only: in-progress writes, renamed into place
    lock                         local backend only: flock held shared by pushes, exclusive by gc

Rules: a put writes blobs first and the manifest last, each atomically, so an entry is visible only
when complete and a killed put leaves at most unreferenced blobs and temp files (``gc`` removes them,
and aborts S3 multipart uploads older than its grace period). A put of different content under an
existing key is refused unless forced. gc and push are safe together: local pushes hold ``lock``
shared and gc takes it exclusively; on every backend gc keeps blobs younger than its grace period
(pushes touch the blobs they reuse) and re-checks each blob just before deleting it. A get validates
the manifest (no absolute paths, no ``..``, no name that is both a file and a directory, names within
the file system's limits), restores into a temp dir beside the destination, hashes every restored
file and renames; a corrupt entry is refused (``verify --repair`` removes it). Local restores are
independent copies (reflinks where the file system has them) with the manifest's executable bit;
hardlinks to the read-only blobs only when asked (``--link``).
"""

from toolchain.registry.store import Registry, open_registry

__all__ = ["Registry", "open_registry"]
