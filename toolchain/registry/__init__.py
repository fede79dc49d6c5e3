"""Content-addressed engine registry over a local directory, S3 or the Hugging Face Hub.

Layout (identical on every backend; ``tests/registry/test_layout.py`` holds it):

    blobs/<algo>/<hh>/<hex>      file contents named by digest (algo: blake3 or sha256); read-only
    manifests/<key>.json         one per entry: files {relpath: {digest, size, executable}},
                                 kind, provenance (GPU, driver, CUDA, TensorRT, TensorRT-LLM,
                                 container, spec, command, build time), created
    refs/tags/<name>             text file holding an entry key
    tmp/                         local backend only: in-progress writes, renamed into place

Rules: a put writes blobs first and the manifest last, each atomically, so an entry is visible only
when complete and a killed put leaves at most unreferenced blobs (``gc`` removes them). A get
validates the manifest (no absolute paths, no ``..``), restores into a temp dir beside the
destination, verifies every digest and renames; a corrupt entry is refused (``verify --repair``
removes it). Local restores use reflinks or hardlinks to the read-only blobs, and a stat cache
(size, mtime, inode) avoids re-hashing a blob that was verified and has not changed since.
"""

from toolchain.registry.store import Registry, open_registry

__all__ = ["Registry", "open_registry"]
