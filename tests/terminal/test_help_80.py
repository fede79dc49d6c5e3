"""`toolchain --help` and every command group's --help as a newcomer reads them: on an 80-column terminal, each
command's summary whole on its own line; piped, never wrapped nor cut (issue 49: all 17 summaries of
`toolchain --help` ended in "...", some mid-phrase)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.terminal.pty_harness import run_on_pty


def _groups() -> list[tuple[list[str], Any]]:
    """Every command group (the top level included): its words after `toolchain`, and its click group."""

    from toolchain.cli.main import command_tree

    out: list[tuple[list[str], Any]] = []

    def walk(path: list[str], group: Any) -> None:
        out.append((path, group))
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                walk([*path, name], sub)

    walk([], command_tree())
    return out


def _summary(cmd: Any) -> str:
    """The whole summary a command should show: its short help, else the first sentence of its help."""
    if cmd.short_help:
        return str(inspect.cleandoc(cmd.short_help)).strip()
    first = inspect.cleandoc(cmd.help or "").split("\n\n")[0].replace("\n", " ")
    words = []
    for word in first.split():
        words.append(word)
        if word.endswith("."):
            break
    return " ".join(words)


def _env(tmp_path: Path, columns: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCHAIN_")}
    return env | {"PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": columns, "HOME": str(tmp_path)}


def _command_lines(text: str) -> list[str]:
    lines = text.replace("\r", "").splitlines()
    start = lines.index("Commands:") + 1
    return [ln for ln in lines[start:] if ln.strip()]


GROUPS = _groups()


@pytest.mark.parametrize(("path", "group"), GROUPS, ids=[" ".join(["toolchain", *p]) for p, _ in GROUPS])
def test_every_summary_shows_whole_on_one_line_at_80_columns(path: list[str], group: Any, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "toolchain.cli.main", *path, "--help"]
    r = run_on_pty(argv, env=_env(tmp_path, "80"), timeout=120, cols=80)
    assert r.returncode == 0, r.describe()
    lines = _command_lines(r.text)
    assert max(len(ln) for ln in r.text.replace("\r", "").splitlines()) <= 80, r.describe()
    assert not [ln for ln in lines if ln.rstrip().endswith(("...", "…"))], r.describe()
    names = list(group.commands)
    assert len(lines) == len(names), r.describe()  # one line each: no summary wrapped onto a second line
    for name, line in zip(names, lines, strict=True):
        assert line.split()[0] == name and line.endswith(_summary(group.commands[name])), (name, r.describe())


def test_piped_help_is_never_wrapped_nor_cut(tmp_path: Path) -> None:
    for path, group in GROUPS:
        argv = [sys.executable, "-m", "toolchain.cli.main", *path, "--help"]
        text = subprocess.run(
            argv, env=_env(tmp_path, "40"), capture_output=True, text=True, timeout=120, check=True
        ).stdout
        lines = _command_lines(text)
        assert len(lines) == len(group.commands), text
        for name, line in zip(group.commands, lines, strict=True):
            assert line.endswith(_summary(group.commands[name])), (name, text)
        description = inspect.cleandoc(group.help or "").split("\n\n")[0].replace("\n", " ")
        assert description in text.splitlines()[2], text  # the first paragraph on one line
