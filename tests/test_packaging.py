"""Packaging rules that need no build: what `find_packages` (setup.py) sees is every module of the package.

`find_packages` only takes directories with an ``__init__.py``; a module directory without one is left out of
the wheel while the editable install still imports it (measured before: ``toolchain/specs/`` had none, so
`pip install` of the wheel failed with ModuleNotFoundError `toolchain.specs`). The full check, a wheel built
and installed into a fresh venv, is tests/serving/test_wheel.py (slow).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]


def test_every_module_directory_is_a_package_find_packages_takes() -> None:
    found = set(find_packages(str(REPO), include=["toolchain", "toolchain.*"]))
    module_dirs = {
        ".".join(d.relative_to(REPO).parts)
        for d in (REPO / "toolchain").rglob("*")
        if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py"))
    }
    module_dirs.add("toolchain")
    assert module_dirs - found == set(), f"module directories without __init__.py: {sorted(module_dirs - found)}"
