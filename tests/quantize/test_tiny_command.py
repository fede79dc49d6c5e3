"""`toolchain tiny-checkpoint --out DIR`: the tiny spec's checkpoint without a checkout's scripts/, and the
errors of a tiny spec whose checkpoint is missing name that command with the exact directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, Cli


def _copied_tiny_spec(tmp_path: Path) -> tuple[Path, Path]:
    """engine_specs/tiny.yaml copied elsewhere, as a wheel user would; its model.source is ../.work/tiny-llama."""
    spec = tmp_path / "specs" / "tiny.yaml"
    spec.parent.mkdir()
    shutil.copyfile(REPO / "engine_specs" / "tiny.yaml", spec)
    return spec, tmp_path / ".work" / "tiny-llama"


def test_a_missing_tiny_checkpoint_names_the_command_that_makes_it(cli: Cli, tmp_path: Path) -> None:
    spec, where = _copied_tiny_spec(tmp_path)
    for args in (("plan", spec), ("build", spec, "--all", "--dry-run"), ("quantize", spec)):
        r = cli(*args)
        assert r.exit_code != 0, r.output
        assert f"toolchain tiny-checkpoint --out {where}" in r.output, r.output
        assert "scripts/" not in r.output


def test_a_directory_that_is_not_a_checkpoint_is_refused(cli: Cli, tmp_path: Path) -> None:
    keep = tmp_path / "models"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    r = cli("tiny-checkpoint", "--out", keep, "--json")
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert "not a checkpoint" in doc["error"] and "another --out" in doc["hint"]
    assert (keep / "notes.txt").read_text() == "mine"
    # --force replaces a checkpoint, never someone's directory (on the branch it deleted it before importing torch)
    assert cli("tiny-checkpoint", "--out", keep, "--force").exit_code == 2
    assert (keep / "notes.txt").read_text() == "mine"


def test_an_existing_checkpoint_is_kept(cli: Cli, tmp_path: Path) -> None:
    there = tmp_path / "ckpt"
    there.mkdir()
    (there / "config.json").write_text("{}")
    r = cli("tiny-checkpoint", "--out", there, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"checkpoint": str(there.resolve()), "written": False}
    assert (there / "config.json").read_text() == "{}"


@pytest.mark.slow
def test_the_command_makes_the_checkpoint_the_copied_spec_plans(cli: Cli, tmp_path: Path) -> None:
    spec, where = _copied_tiny_spec(tmp_path)
    r = cli("tiny-checkpoint", "--out", where)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(where.resolve())
    assert (where / "config.json").is_file() and (where / "tokenizer.json").is_file()
    plan = cli("plan", spec, "--json")
    assert plan.exit_code == 0, plan.output
