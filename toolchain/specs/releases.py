"""TensorRT-LLM releases and the Triton containers that ship them, as data (docs/releases.md).

One row per TensorRT-LLM line the toolchain targets. A row says whether the release builds TensorRT
engines (``trtllm-build`` and Triton's ``tensorrtllm`` C++ backend), which LLM-API argument model its
PyTorch runtime takes (``toolchain.specs.llmapi``), the TensorRT it ships, and the Triton containers
that carry it. Every row names its upstream source; docs/releases.md shows the same table.

Versions compare as (major, minor, patch, pre-release): ``1.3.0rc21`` < ``1.3.0rc29`` < ``1.3.0``, and a
fourth numeric part (``1.0.3.2510``) orders after its patch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PARTS = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:rc(\d+))?")
FINAL = 10**6  # the pre-release rank of a final release: after every rc


def version_key(v: str) -> tuple[int, int, int, int, int]:
    """``1.3.0rc29`` -> (1, 3, 0, 0, 29); a final release ranks after its pre-releases."""
    m = _PARTS.match(v)
    if m is None:
        return (0, 0, 0, 0, 0)
    major, minor, patch, extra, rc = m.groups()
    return int(major), int(minor), int(patch or 0), int(extra or 0), int(rc) if rc else FINAL


@dataclass(frozen=True)
class Release:
    """One TensorRT-LLM line, from ``first`` to ``last`` (inclusive, by ``version_key``)."""

    first: str
    last: str
    engines: bool  # trtllm-build, TensorRT engines and the tensorrtllm Triton backend
    llmapi: str | None  # the LLM-API argument model the toolchain writes for it; None: not supported here
    tensorrt: str | None  # the TensorRT the release's container ships (None: no TensorRT)
    containers: tuple[str, ...]  # tritonserver:<tag>-trtllm-python-py3 tags that ship it
    source: str

    def covers(self, version: str) -> bool:
        return version_key(self.first) <= version_key(version) <= version_key(self.last)

    @property
    def name(self) -> str:
        if self.last == LATER:
            return f"{self.first} and later"
        return self.first if self.first == self.last else f"{self.first}-{self.last}"


LATER = "999.0.0"  # the last row covers every later release the table does not know yet
TRITON = "triton-inference-server/server docs/introduction/compatibility.md (container trtllm-python-py3)"
REMOVAL = (
    "NVIDIA/TensorRT-LLM docs/source/legacy/tensorrt-backend-removal.md; PRs #15763, #15907, #15918, #16369 "
    "(removed in 1.3.0rc21, 15 July 2026)"
)

RELEASES: tuple[Release, ...] = (
    Release("1.0.0", "1.0.0", True, None, "10.11.0.33", ("25.09", "25.10"), TRITON),
    Release("1.0.3.2510", "1.0.3.2510", True, None, "10.13.3.9", ("25.11",), TRITON),
    Release("1.1.0", "1.1.0", True, None, "10.13.3.9", ("25.12", "26.01", "26.02"), TRITON),
    Release("1.2.0", "1.2.0", True, "1.2", None, ("26.03",), TRITON),
    Release("1.2.1", "1.2.1", True, "1.2", "10.14.1.48", ("26.04", "26.05", "26.06", "26.07"), TRITON),
    # 1.3.0rc1-rc20 still had engines, but the toolchain builds engines with 1.0-1.2.x only and writes
    # the 1.3 argument model from rc21 on.
    Release("1.3.0rc21", LATER, False, "1.3", None, (), REMOVAL),
)
ENGINE_LINE = "1.0-1.2.x"
LAST_ENGINES = "1.2.1"  # the newest release that builds engines (Triton 26.04-26.07)


def release_of(version: str) -> Release | None:
    for r in RELEASES:
        if r.covers(version):
            return r
    return None


def builds_engines(version: str) -> bool:
    """Whether the toolchain can build TensorRT engines with this release (1.0-1.2.x)."""
    r = release_of(version)
    return r is not None and r.engines


def llmapi_line(version: str) -> str | None:
    """The LLM-API argument model (``"1.2"`` or ``"1.3"``) the toolchain writes for this release."""
    r = release_of(version)
    return r.llmapi if r is not None else None


def default_runtime(version: str) -> str:
    """``pytorch`` wherever the toolchain writes LLM-API options for the release, else ``tensorrt``."""
    return "pytorch" if llmapi_line(version) is not None else "tensorrt"


def tensorrt_of(version: str) -> str | None:
    r = release_of(version)
    return r.tensorrt if r is not None else None


def container_tags() -> dict[str, tuple[str, str | None]]:
    """Triton container tag -> (TensorRT-LLM, TensorRT) it ships."""
    return {tag: (r.first, r.tensorrt) for r in RELEASES for tag in r.containers}


def triton_container(version: str) -> str | None:
    """The newest Triton TensorRT-LLM container that ships ``version``."""
    tags = [tag for tag, (llm, _) in container_tags().items() if llm == version]
    return f"nvcr.io/nvidia/tritonserver:{max(tags)}-trtllm-python-py3" if tags else None
