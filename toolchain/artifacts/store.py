"""What a stage needs from an artifact store, as a protocol: stages receive a store and never open one.

``toolchain.registry.Registry`` implements it; the pipeline and the CLI open the registry and pass it in, so a
stage such as compile publishes artifacts without importing the registry stage.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol


class ArtifactStore(Protocol):
    """A content-addressed store of directories by key."""

    url: str

    def exists(self, key: str) -> bool:
        """Whether an entry with this full key is stored."""
        ...

    def existing(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` are stored, asked at once (one listing for many keys)."""
        ...

    def resolve(self, ref: str) -> str:
        """A full key, a unique key prefix or a tag -> the full key."""
        ...

    def get(self, ref: str, dest: Path, *, force: bool = False) -> Any:
        """Restore an entry into ``dest`` (verified)."""
        ...

    def put(
        self,
        key: str,
        src: Path,
        *,
        kind: str = "engine",
        provenance: dict[str, Any] | None = None,
        force: bool = False,
    ) -> Any:
        """Store every regular file under ``src`` as entry ``key``."""
        ...
