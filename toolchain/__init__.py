"""TensorRT-LLM compilation and deployment toolchain.

The library never imports Typer; ``toolchain.cli`` is the thin command-line layer.
"""

__version__ = "0.1.0"
