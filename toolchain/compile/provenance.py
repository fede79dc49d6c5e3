"""What a built artifact was built with: GPU, driver, CUDA, TensorRT, TensorRT-LLM, container.

The engine's own config.json records none of this (docs/trtllm-build.md, "The built engine"), so it
goes into the registry manifest.
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from toolchain import __version__, settings
from toolchain.proc import capture

_PROBE = """
import json
out = {}
for mod in ("tensorrt_llm", "tensorrt"):
    try:
        m = __import__(mod)
        out[mod] = getattr(m, "__version__", "unknown")
    except Exception as e:
        out[mod] = None
print(json.dumps(out))
"""


def installed_versions(python: str | None = None) -> dict[str, str | None]:
    """TensorRT-LLM and TensorRT versions as the build's Python sees them (None when absent)."""
    try:
        out = capture([python or sys.executable, "-c", _PROBE], timeout=120)
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"tensorrt_llm": None, "tensorrt": None}


def cuda_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetCudaDriverVersion()
        pynvml.nvmlShutdown()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return None


def provenance(versions: dict[str, str | None]) -> dict[str, Any]:
    from toolchain.hardware.detect import detect_gpus

    gpus, reason = detect_gpus()
    g = gpus[0] if gpus else None
    return {
        "gpu": {
            "name": g.name,
            "compute_capability": g.compute_capability,
            "memory_bytes": g.memory_total_bytes,
            "count": len(gpus),
        }
        if g
        else None,
        "gpu_absent_reason": reason,
        "driver": g.driver if g else None,
        "cuda": cuda_driver_version(),
        "tensorrt": versions.get("tensorrt"),
        "tensorrt_llm": versions.get("tensorrt_llm"),
        "container_image": settings.container_image(),
        "host": platform.node(),
        "toolchain": __version__,
    }
