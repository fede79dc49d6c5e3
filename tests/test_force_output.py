"""`--force` replaces only what the toolchain wrote: never a directory of the user's own files, the working
directory or the home directory (measured before: `deploy --out proj --force` deleted proj/src/main.c)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import SPECS, Cli
from toolchain.digest import check_replaceable
from toolchain.errors import UserInputError


def test_absent_or_empty_output_is_always_replaceable(tmp_path: Path) -> None:
    check_replaceable(tmp_path / "new", "deploy.json")
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", "deploy.json")


def test_own_output_is_replaceable_and_foreign_files_are_not(tmp_path: Path) -> None:
    out = tmp_path / "proj"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(UserInputError, match="did not write"):
        check_replaceable(out, "deploy.json")
    (out / "deploy.json").write_text("{}")
    check_replaceable(out, "deploy.json")


def test_working_and_home_directories_are_never_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "f").write_text("x")
    monkeypatch.chdir(work)
    for d in (work, tmp_path / "a"):
        (d / "deploy.json").write_text("{}")
        with pytest.raises(UserInputError, match="working directory"):
            check_replaceable(d, "deploy.json")
    monkeypatch.chdir("/")
    with pytest.raises(UserInputError, match="home directory"):
        check_replaceable(Path(os.environ["HOME"]).parent, None)


def test_deploy_force_keeps_a_users_directory(cli: Cli, tmp_path: Path) -> None:
    run = cli
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    r = run(
        "deploy", SPECS / "llama-3.1-8b-fp8.yaml", "--out", proj, "--force", "--registry", "s3://b/p",
        "--engine", "a" * 64, "--tokenizer", tok, "--image", "registry.example.com/llm:1",
    )  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "did not write" in r.output and (proj / "src" / "main.c").is_file()
