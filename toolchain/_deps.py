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
