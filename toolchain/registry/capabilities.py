"""What some backends can do beyond the ``Backend`` interface, as protocols checked by type
(``isinstance(backend, StoresSignatures)``), and what ``toolchain.registry.signing`` needs of a registry.

The one place these are declared. This module imports no other module of the registry (``backends`` only for
type checking, which imports none of the registry's modules back), so the store, the signing code and the OCI
package can all depend on it without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from toolchain.registry.backends import Backend


@runtime_checkable
class ResolvesManifestDigests(Protocol):
    """A store whose entries are also named by another digest (OCI: the manifest digest a client sees)."""

    def key_of_manifest_digest(self, hexd: str) -> str | None:
        """The entry key a 64-hex manifest digest names; None when the store holds no such manifest."""
        ...


@runtime_checkable
class StoresSignatures(Protocol):
    """A store that keeps entry signatures its own way (OCI: cosign signature manifests) instead of the
    ``manifests/<key>.sig`` file of the other stores."""

    def signed_subject(self, key: str) -> tuple[bytes, str]:
        """(the entry's trusted record bytes, the digest a signature of the entry names)."""
        ...

    def read_signatures(self, subject: str) -> list[tuple[bytes, str]]:
        """Every (payload, base64 signature) stored for ``subject``."""
        ...

    def write_signature(self, subject: str, payload: bytes, sig: str) -> None:
        """Add a signature of ``subject``, keeping the other signers' ones."""
        ...

    def drop_signatures(self, subject: str) -> None:
        """Remove every signature of ``subject`` (a manifest the entry no longer is: ``push --force``)."""
        ...


@runtime_checkable
class ReportsWaits(Protocol):
    """A store that says what it waits on while a request has had no answer for a while (OCI): ``waiting``,
    when set, is called with one short line (``waiting on HOST: GET blob (4 s)``) every few seconds."""

    waiting: Callable[[str], None] | None


@runtime_checkable
class ChecksRecords(Protocol):
    """A store whose entry manifests are checked against the toolchain's record kept beside them (OCI: the
    manifest's config blob). An entry pushed before records has none: it is refused unless ``allow_legacy``,
    and each key served without a record is added to ``legacy_served``."""

    allow_legacy: bool
    legacy_served: set[str]


class SignedRegistry(Protocol):
    """What signing and verifying need of a registry (``toolchain.registry.store.Registry`` is one)."""

    @property
    def url(self) -> str: ...

    @property
    def backend(self) -> Backend: ...

    def resolve(self, ref: str) -> str: ...

    def keys(self) -> list[str]: ...
