"""Every YAML file the toolchain writes repeats a shared value instead of anchoring it (``&id001`` /
``*id001`` hide a Deployment's labels from a reviewer, a diff and a policy grep)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

ANCHOR = re.compile(r"(^|[\s:\-\[,])[&*]id\d{3}\b", re.M)


def test_no_module_writes_yaml_around_the_plain_dumper() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "toolchain").rglob("*.py"))
        if p.name != "yamlout.py" and re.search(r"yaml\.(safe_)?dump(_all)?\(", p.read_text())
    ]
    assert not offenders, f"write YAML with toolchain.yamlout.dump (no anchors): {offenders}"


@pytest.mark.slow
def test_the_dynamo_graph_deployment_has_no_anchors(cli: Any, tmp_path: Path) -> None:
    spec = REPO / "engine_specs" / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
    r = cli("dynamo", "deploy", spec, "--out", tmp_path / "dgd", "--allow-unquantized")
    assert r.exit_code == 0, r.output
    written = sorted((tmp_path / "dgd").glob("*.yaml"))
    assert written
    for f in written:
        assert not ANCHOR.search(f.read_text()), f"{f.name} has a YAML anchor or alias"
