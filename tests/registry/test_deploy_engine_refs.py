"""`--engine` means one thing in both deploy commands (issue 38, item 6): a full key, a unique prefix, a tag or a
digest reference, resolved in the registry the pods pull from; the DynamoGraphDeployment's pull step names the
full key. Against a real OCI registry (CNCF distribution on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS
from toolchain.registry import open_registry

pytestmark = pytest.mark.timeout(300)
DISAGG = SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
KEY = "e" * 64
IMAGE = "registry.example/toolchain@sha256:" + "0" * 64


def _pulled_keys(out: Path) -> set[str]:
    d = yaml.safe_load((out / "dynamographdeployment.yaml").read_text())
    return {c["podTemplate"]["spec"]["initContainers"][0]["command"][-2] for c in d["spec"]["components"][1:]}


@pytest.mark.slow
@pytest.mark.parametrize("verb", [("dynamo", "deploy"), ("deploy",)])
def test_a_tag_or_prefix_resolves_to_the_full_key(
    cli: Any, oci_url: str, engine_dir: Path, tmp_path: Path, verb: tuple[str, ...]
) -> None:
    r = open_registry(oci_url)
    r.put(KEY, engine_dir)
    r.tag(KEY, "prod")
    image_flag = "--toolchain-image" if verb[0] == "dynamo" else "--image"
    for i, ref in enumerate(("prod", KEY[:12], KEY)):
        out = tmp_path / f"o{i}"
        res = cli(*verb, DISAGG, "--out", out, "--engine", ref, "--registry", oci_url, image_flag, IMAGE)
        assert res.exit_code == 0, res.output
        assert _pulled_keys(out) == {KEY}, ref


def test_an_unknown_ref_is_a_one_line_error_naming_the_registry(cli: Any, oci_url: str, tmp_path: Path) -> None:
    res = cli("dynamo", "deploy", DISAGG, "--out", tmp_path / "o", "--engine", "nosuchtag", "--registry", oci_url,
              "--toolchain-image", IMAGE)  # fmt: skip
    assert res.exit_code != 0
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "nosuchtag" in lines[0] and oci_url.split("://")[1] in lines[0], res.output
    assert not (tmp_path / "o").exists()
