"""GPU catalog and local GPU detection."""

from toolchain.hardware.catalog import CATALOG, GPU, lookup_gpu

__all__ = ["CATALOG", "GPU", "lookup_gpu"]
