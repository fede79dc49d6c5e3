"""The toolchain source a deploy context carries when the toolchain runs from an installed wheel: the package
directory plus a pyproject.toml written from the distribution's metadata (toolchain.deploy.context).

The metadata below is written by hand in the core-metadata format (packaging.python.org, "Core metadata
specifications": Requires-Dist with an ``extra == "name"`` marker, Provides-Extra) and the entry-points file
format ("Entry points specification"); nothing here is read from a real install."""

from __future__ import annotations

from importlib.metadata import PathDistribution
from pathlib import Path

import pytest
import tomllib

from toolchain.deploy import context
from toolchain.errors import DeployError

METADATA = """\
Metadata-Version: 2.4
Name: toolchain
Version: 9.8.7
Summary: a test distribution
Requires-Python: >=3.10
Provides-Extra: s3
Provides-Extra: old
Provides-Extra: empty
Requires-Dist: typer>=0.12
Requires-Dist: boto3; extra == "s3"
Requires-Dist: tomli; python_version < "3.11" and extra == "old"
Requires-Dist: colorama; sys_platform == "win32"
"""


def _installed(tmp_path: Path) -> tuple[Path, PathDistribution]:
    site = tmp_path / "site-packages"
    pkg = site / "toolchain"
    for rel in ("__init__.py", "cli/__init__.py", "cli/main.py", "py.typed", "deploy/__init__.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("# x\n")
    (pkg / "deploy" / "entrypoint.sh").write_text("#!/bin/sh\n")
    (pkg / "triton_repo" / "preprocessing" / "1").mkdir(parents=True)
    (pkg / "triton_repo" / "preprocessing" / "1" / "model.py").write_text("# a Triton model, not a module\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    info = site / "toolchain-9.8.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA)
    (info / "entry_points.txt").write_text("[console_scripts]\ntoolchain = toolchain.cli.main:run\n")
    return pkg, PathDistribution(info)


def test_requirements_keep_every_condition_but_the_extra() -> None:
    assert context._split_extra('boto3; extra == "s3"') == ("boto3", "s3")
    assert context._split_extra("tomli; python_version < '3.11' and extra == 'old'") == (
        "tomli; python_version < '3.11'",
        "old",
    )
    assert context._split_extra('colorama; sys_platform == "win32"') == ('colorama; sys_platform == "win32"', None)
    assert context._split_extra("typer>=0.12") == ("typer>=0.12", None)


def test_the_written_pyproject_rebuilds_the_installed_distribution(tmp_path: Path) -> None:
    pkg, dist = _installed(tmp_path)
    dest = tmp_path / "src"
    context._copy_installed(pkg, dist, dest)
    doc = tomllib.loads((dest / "pyproject.toml").read_text())
    project = doc["project"]
    assert (project["name"], project["version"], project["requires-python"]) == ("toolchain", "9.8.7", ">=3.10")
    assert project["dependencies"] == ["typer>=0.12", 'colorama; sys_platform == "win32"']
    assert project["optional-dependencies"] == {
        "s3": ["boto3"],
        "old": ['tomli; python_version < "3.11"'],
        "empty": [],
    }
    assert project["scripts"] == {"toolchain": "toolchain.cli.main:run"}
    setuptools = doc["tool"]["setuptools"]
    assert setuptools["packages"] == ["toolchain", "toolchain.cli", "toolchain.deploy"]
    assert setuptools["package-data"] == {
        "toolchain": ["py.typed", "triton_repo/preprocessing/1/model.py"],
        "toolchain.deploy": ["entrypoint.sh"],
    }
    assert not list(dest.rglob("__pycache__"))


def test_metadata_of_another_install_is_refused(tmp_path: Path) -> None:
    """The distribution found must own the running package's files: a stale install beside sources run from
    elsewhere would rebuild something else."""
    pkg, _ = _installed(tmp_path)
    with pytest.raises(DeployError, match="neither a source checkout nor an installed distribution"):
        context._installed_distribution(pkg)
