"""Packages: toolchain, plus triton_repo/ shipped as toolchain.triton_repo (model sources for `triton emit`)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["toolchain", "toolchain.*"]), "toolchain.triton_repo"],
    package_dir={"toolchain.triton_repo": "triton_repo"},
)
