"""A quantized checkpoint on disk: its manifest, the check that it is complete, and what its config records.

Layout (written by the quantize stage, read by the build and Triton stages)::

    trtllm/         config.json + rank{N}.safetensors + tokenizer files   (input of trtllm-build)
    hf/             unified HF checkpoint + hf_quant_config.json + tokenizer (LLM API)
    manifest.json   inputs, recipe, calibration digest, file digests, versions, accuracy, timing
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.digest import hash_file

# TRT-LLM checkpoint quant_algo per format (facts §2.2; ModelOpt's exporter writes these).
QUANT_ALGO = {
    "fp8": "FP8",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "int8_sq": "W8A8_SQ_PER_CHANNEL",
    "int8_wo": "W8A16",
    "nvfp4": "NVFP4",
}


def file_digests(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[p.relative_to(root).as_posix()] = {"size": p.stat().st_size, "digest": hash_file(p)}
    return out


def read_manifest(out: Path) -> dict[str, Any] | None:
    m = out / "manifest.json"
    if not m.is_file():
        return None
    try:
        data = json.loads(m.read_text())
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def verify_output(out: Path) -> dict[str, Any] | None:
    """The manifest when every listed file is present with its digest; None otherwise."""
    data = read_manifest(out)
    if data is None:
        return None
    for rel, meta in data.get("files", {}).items():
        p = out / rel
        if not p.is_file() or p.stat().st_size != meta["size"] or hash_file(p) != meta["digest"]:
            return None
    return data
