"""Where every artifact lives on disk: the local cache layout (the map is in ``toolchain.artifacts``)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from toolchain import settings


@dataclass(frozen=True)
class CacheLayout:
    """Paths under one cache root. Nothing here creates directories; callers that write do."""

    root: Path

    @property
    def registry(self) -> Path:
        """The default (local) engine registry."""
        return self.root / "registry"

    def quantized(self, spec_name: str, weights: str, tp: int, pp: int, qkey: str) -> Path:
        """A quantized checkpoint (``trtllm/``, ``hf/``, ``manifest.json``), named for people and keyed by content."""
        return self.root / "quantized" / f"{spec_name}-{weights}-tp{tp}pp{pp}-{qkey[:12]}"

    def engine(self, key: str) -> Path:
        """An engine fetched from a registry for serving."""
        return self.root / "engines" / key

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def build_log(self, cell_id: str, key: str) -> Path:
        return self.logs / f"build-{cell_id}-{key[:12]}.log"

    def server_log(self) -> Path:
        return self.logs / f"tritonserver-{int(time.time())}.log"

    @property
    def build_work(self) -> Path:
        """Parent of the temporary work directories of builds (removed when a build ends)."""
        return self.root / "builds"

    def up_work(self, spec_name: str, cell_id: str) -> Path:
        """`toolchain up`'s per-cell work directory: ``repo/``, ``tritonserver.log``, ``bench.json``, ``report/``."""
        return self.root / "up" / f"{spec_name}-{cell_id}"

    def dynamo_run(self, spec_name: str) -> Path:
        """`toolchain dynamo up`'s run directory (worker and frontend logs, discovery, model card); one per run."""
        return self.root / "dynamo" / f"{spec_name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"

    def triton_backends(self) -> Path:
        """Triton backend directory for this interpreter's Python-backend stub."""
        return self.root / "triton-backends" / f"{sys.version_info[0]}.{sys.version_info[1]}"

    @property
    def statcache(self) -> Path:
        """sha256 digests of checkpoint files by (path, size, mtime, inode)."""
        return self.root / "statcache.json"

    @property
    def statcache_blake3(self) -> Path:
        """blake3 digests of files pushed to a registry."""
        return self.root / "statcache-blake3.json"

    @property
    def signatures_seen(self) -> Path:
        """The newest signature sequence seen per registry and entry key (``toolchain.registry.freshness``)."""
        return self.root / "trust" / "seen.json"

    @property
    def verified_blobs(self) -> Path:
        """Registry blobs already verified, by (path, size, mtime, inode)."""
        return self.root / "verified-blobs.json"

    def staging_entry(self, staging_dir: Path) -> Path:
        """The journal file of a staging directory in use (``toolchain.digest.staging_journal``): `cache gc` finds
        the ones a killed pull left through it (the two are held equal by tests/registry/test_gc_staging.py)."""
        from toolchain.digest import sha256_text

        return self.root / "staging" / f"{sha256_text(str(staging_dir))[:32]}.path"


def cache() -> CacheLayout:
    """The cache layout under ``$TOOLCHAIN_CACHE`` (read now, not at import)."""
    return CacheLayout(settings.cache_home())
