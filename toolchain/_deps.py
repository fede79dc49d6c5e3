"""Import optional heavy dependencies with an install hint instead of a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

from toolchain.errors import MissingDependencyError


def require(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name and not module.startswith(e.name.split(".")[0]):
            raise
        raise MissingDependencyError(module, extra) from e


# Top-level import name -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRAS = {
    "torch": "quantize",
    "transformers": "quantize",
    "modelopt": "quantize",
    "safetensors": "quantize",
    "accelerate": "quantize",
    "tokenizers": "quantize",
    "tritonclient": "triton",
    "pytriton": "triton",
    "google": "triton",  # protobuf, through tritonclient
    "grpc": "triton",
    "numpy": "triton",
    "httpx": "triton",
    "boto3": "s3",
    "botocore": "s3",
    "huggingface_hub": "hf",
    "pynvml": "gpu",
    "matplotlib": "report",
    "jinja2": "report",
    "cryptography": "sign",
}


def extra_for(module: str) -> str | None:
    """The extra that provides ``module`` (a dotted name), or None for a module no extra provides."""
    return EXTRAS.get(module.split(".")[0]) if module else None


# One module per extra that tells whether the extra is installed.
MARKERS = {"quantize": "modelopt", "triton": "tritonclient", "report": "jinja2", "s3": "boto3", "hf": "huggingface_hub"}


def need_extras(*extras: str) -> None:
    """Fail up front, naming every missing extra at once, for work that needs several of them."""
    import importlib.util

    missing: list[tuple[str, str]] = []
    for extra in extras:
        module = MARKERS[extra]
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            missing.append((extra, module))
    if missing:
        raise MissingDependencyError(missing[0][1], ",".join(e for e, _ in missing))
