"""A quantized checkpoint on disk: its manifest, the check that it is complete, and what its config records.

Layout (written by the quantize stage, read by the build and Triton stages)::

    trtllm/         config.json + rank{N}.safetensors + tokenizer files   (input of trtllm-build)
    hf/             unified HF checkpoint + hf_quant_config.json + tokenizer (LLM API)
    manifest.json   inputs, recipe, calibration digest, file digests, versions, accuracy, timing
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain.artifacts.layout import cache
from toolchain.digest import hash_file, shared_stat_cache

# TRT-LLM checkpoint quant_algo per format (docs/trtllm-build.md, "Checkpoints"; ModelOpt's exporter writes these).
QUANT_ALGO = {
    "fp8": "FP8",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "int8_sq": "W8A8_SQ_PER_CHANNEL",
    "int8_wo": "W8A16",
    "nvfp4": "NVFP4",
}


def file_digests(
    root: Path, *, stop: Callable[[], bool] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, os.stat_result]]:
    """{relpath: {size, digest}} of every file under ``root``, and each file's stat when it was hashed.
    ``stop``, checked between files, ends the walk early (the result is then incomplete)."""
    out, stats = {}, {}
    for p in sorted(root.rglob("*")):
        if stop is not None and stop():
            break
        if p.is_file():
            rel = p.relative_to(root).as_posix()
            stats[rel] = p.stat()
            out[rel] = {"size": stats[rel].st_size, "digest": hash_file(p)}
    return out, stats


def remember_digests(out: Path, files: dict[str, dict[str, Any]], hashed: dict[str, os.stat_result]) -> None:
    """Record the digests just computed for ``out``'s files in the stat cache (``verify_output`` then
    need not read them). Renaming a directory leaves its files' inode and ctime alone, so digests taken
    in the staging directory hold under the final path; a file changed since is simply not recorded."""
    stat_cache = shared_stat_cache(cache().statcache)
    for rel, meta in files.items():
        stat_cache.record(out / rel, hashed[rel], meta["digest"])
    stat_cache.save()


def read_manifest(out: Path) -> dict[str, Any] | None:
    m = out / "manifest.json"
    if not m.is_file():
        return None
    try:
        data = json.loads(m.read_text())
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def verify_output(out: Path, *, rehash: bool = False) -> dict[str, Any] | None:
    """The manifest when every listed file is present with its digest; None otherwise.

    A file is read again only when its stat signature (size, mtime, ctime, inode) differs from the
    one recorded when it was last hashed; ``rehash`` reads every file.
    """
    data = read_manifest(out)
    if data is None:
        return None
    stat_cache = shared_stat_cache(cache().statcache)
    try:
        for rel, meta in data.get("files", {}).items():
            p = out / rel
            if not p.is_file() or p.stat().st_size != meta["size"]:
                return None
            if stat_cache.digest(p, rehash=rehash) != meta["digest"]:
                return None
    finally:
        stat_cache.save()
    return data
