"""Open a registry backend by URL (local path, s3://, hf://, oci://): the one module that knows every backend, so the
backends themselves never import each other."""

from __future__ import annotations

from pathlib import Path

from toolchain import settings
from toolchain.errors import RegistryURLError
from toolchain.registry.backends import Backend, HFBackend, LocalBackend, S3Backend


def open_backend(url: str | None, *, must_exist: bool = False) -> Backend:
    """Choose a backend by URL: local path (default ~/.cache/toolchain/registry), s3://, hf://, oci://.
    ``must_exist`` (commands that only read or tidy): a local registry that was named (flag or
    TOOLCHAIN_REGISTRY) but is not there is a mistyped path, not an empty registry to create."""
    from toolchain.artifacts.layout import cache

    url = url or settings.registry_url()
    if not url:
        return LocalBackend(cache().registry)
    if url.startswith("s3://"):
        rest = url[5:]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise RegistryURLError(f"'{url}' names no bucket")
        return S3Backend(bucket, prefix)
    if url.startswith("hf://"):
        repo = url[5:].strip("/")
        if repo.count("/") != 1:
            raise RegistryURLError(f"'{url}' is not hf://org/repo")
        return HFBackend(repo)
    if url.startswith("oci://"):
        from toolchain.registry.oci import OCIBackend, parse_oci_url  # httpx: only for an OCI registry

        return OCIBackend(*parse_oci_url(url))
    if url.startswith("file://"):
        url = url[7:]
    if "://" in url:
        raise RegistryURLError(f"unknown registry scheme in '{url}'")
    root = Path(url).expanduser()
    if must_exist and not root.is_dir():
        raise RegistryURLError(
            f"no registry at {root.resolve()}",
            "check --registry / TOOLCHAIN_REGISTRY (a registry is created by `cache push` or `build`)",
        )
    if must_exist and not is_local_registry(root):
        raise RegistryURLError(
            f"{root.resolve()} is not a registry (it holds files other than blobs/, manifests/, refs/, tmp/)",
            "check --registry / TOOLCHAIN_REGISTRY: name the registry directory itself",
        )
    return LocalBackend(root)


REGISTRY_NAMES = frozenset({"blobs", "manifests", "refs", "tmp", "lock"})


def is_local_registry(root: Path) -> bool:
    """A directory a registry could be: empty, or holding only the registry's own names (at least one of
    which is there). Commands that only read or tidy (``gc``) refuse anything else, so that a mistyped
    ``--registry`` never gets a ``tmp/`` created in it or its files planned for removal."""
    try:
        names = {p.name for p in root.iterdir()}
    except OSError:
        return False
    return names <= REGISTRY_NAMES
