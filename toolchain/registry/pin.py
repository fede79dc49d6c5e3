"""The digest a deployment pins its pods' pull to (docs/deploy.md, "The pods pull one manifest").

A pod starts with an empty cache, so the freshness record (``$TOOLCHAIN_CACHE/trust/seen.json``) cannot protect it:
whoever can write the registry could replace what the key names before a rolling restart. `toolchain deploy` and
`toolchain dynamo deploy` therefore read, where they run, the digest ``cache pull --digest`` compares against
(:func:`toolchain.registry.signing.entry_digest`) and write it into the pods, whose pull then refuses (exit 6) any
other manifest.
"""

from __future__ import annotations

from typing import Any


def digest_for_pods(registry: str, key: str) -> tuple[str | None, str]:
    """``(digest, "")`` of entry ``key`` in ``registry`` as it is served now, or ``(None, why)`` when it cannot be
    read from here: the registry unreachable, its credentials given to the pods only, or the entry not pushed yet.
    Never raises for any of those: the deployment is still written, unpinned, and says so."""
    from toolchain.errors import ToolchainError
    from toolchain.registry.signing import entry_digest
    from toolchain.registry.store import open_registry

    try:
        return entry_digest(open_registry(registry, must_exist=True), key), ""
    except ToolchainError as e:
        return None, " ".join(e.message.split())[:200]
    except Exception as e:  # a client library's own error (botocore's ProfileNotFound, a bad endpoint URL...)
        said = " ".join(str(e).split())[:160] or "its client failed"
        return None, f"the registry could not be opened here: {said}"


def pin_for_pods(registry: str, key: str, progress: Any) -> tuple[str | None, list[str]]:
    """The manifest digest of ``key`` that the pods' pull is pinned to, read from ``registry`` now, and the warnings
    to say: none, or the one line of :func:`unpinned` when it cannot be read from here (docs/deploy.md, "The pods
    pull one manifest"). `toolchain deploy` and `toolchain dynamo deploy` alike."""
    progress(f"reading the manifest digest of engine {key[:16]} to pin the pods' pull to it")
    digest, why = digest_for_pods(registry, key)
    return digest, ([] if digest else [unpinned(key, why)])


def unpinned(key: str, why: str) -> str:
    """The one line a deployment written without an engine digest says (stderr, and ``warnings`` in --json): its
    pods pull by key alone (docs/deploy.md, "The pods pull one manifest")."""
    return (
        f"engine {key[:16]} is not pinned ({why}): the pods will accept whatever manifest the key names when they "
        "pull it; pin it with --engine-digest sha256:HEX (the `pin:` line of `toolchain cache show KEY`), or deploy "
        "from where the registry can be read"
    )
