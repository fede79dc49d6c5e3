"""Local GPU detection through NVML; "no GPU" is a normal answer, not an error."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalGPU:
    index: int
    name: str
    compute_capability: str
    memory_total_bytes: int
    driver: str


def detect_gpus() -> tuple[list[LocalGPU], str | None]:
    """Return the local GPUs, and a reason string when there are none."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"no NVIDIA driver/GPU ({type(e).__name__})"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        out: list[LocalGPU] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
            out.append(LocalGPU(i, name, f"{major}.{minor}", int(mem), driver))
        return out, (None if out else "NVML reports zero GPUs")
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
