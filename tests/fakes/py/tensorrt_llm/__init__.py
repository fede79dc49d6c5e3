"""Test stand-in: only the version string the toolchain probes (TensorRT-LLM cannot exist here)."""

__version__ = "1.2.1"
