"""Every engine spec a command's --help names exists, so its examples run as printed."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import REPO
from toolchain.cli.main import command_tree


def _helps(cmd: Any, ctx: Any) -> list[str]:
    out = [cmd.get_help(ctx)]
    if hasattr(cmd, "list_commands"):  # a group: every subcommand too
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                out += _helps(sub, sub.context_class(sub, info_name=name, parent=ctx))
    return out


def test_specs_named_in_help_exist() -> None:
    root = command_tree()
    text = "\n".join(_helps(root, root.context_class(root, info_name="toolchain")))
    named = set(re.findall(r"engine_specs/[\w.-]+\.yaml", text))
    assert named, "no example names a spec"
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert not missing, f"--help names specs that do not exist: {missing}"


def test_examples_keep_one_command_per_line() -> None:
    """Click rewraps help paragraphs: the examples of a command ran together into one block ("--dry-run
    toolchain deploy ..."), and a backslash continuation joined two lines into one."""
    root = command_tree()
    ctx = root.context_class(root, info_name="toolchain", terminal_width=80, max_content_width=80)
    for text in _helps(root, ctx):
        if "Examples:" not in text:
            continue
        examples = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
        for line in examples.splitlines():
            body = line.strip()
            assert body.count("toolchain ") <= 1 or "$(toolchain" in body, f"examples run together: {line!r}"
            assert "         --" not in body, f"a continuation was joined into one line: {line!r}"
