"""The JSON Schema editors use: committed where every shipped spec's modeline points, current, GPU names known."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from toolchain.hardware.catalog import CATALOG
from toolchain.specs.models import schema

MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_spec_points_at_the_committed_schema_and_passes_it(spec: Path) -> None:
    first = spec.read_text().splitlines()[0]
    m = MODELINE.match(first)
    assert m, f"{spec.name} lacks the yaml-language-server modeline on its first line"
    target = (spec.parent / m.group(1)).resolve()
    assert target == REPO / "engine-spec.schema.json" and target.is_file()
    jsonschema.validate(yaml.safe_load(spec.read_text()), json.loads(target.read_text()))


def test_committed_schema_is_what_spec_schema_prints(cli: Cli) -> None:
    r = cli("spec", "schema")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == json.loads((REPO / "engine-spec.schema.json").read_text()), (
        "regenerate it: toolchain spec schema > engine-spec.schema.json"
    )


def test_schema_knows_the_gpu_names() -> None:
    doc = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    s = schema()
    names = set(s["$defs"]["Matrix"]["properties"]["gpu"]["items"]["enum"])
    assert {g.name for g in CATALOG.values()} <= names
    jsonschema.validate(doc, s)
    doc["matrix"]["gpu"] = ["H100-SMX"]  # a typo the loader refuses must be red in the editor too
    with pytest.raises(jsonschema.ValidationError, match="H100-SMX"):
        jsonschema.validate(doc, s)
