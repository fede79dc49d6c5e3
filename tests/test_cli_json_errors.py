"""Every command that takes --json prints one JSON document on stdout, errors included.

Before, only `spec validate --json` did: `cache ls --json --registry /nonexistent` or `build SPEC --all --json`
on a fresh cache printed nothing on stdout, so a script reading it got an empty string instead of the reason.
The error document is ``{"error", "hint", "exit"}`` (the same message and hint as the ``Error:`` line on stderr);
a command that printed its own document (spec validate's per-spec results) prints no second one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPECS
from tests.helpers import copied_tiny_spec
from toolchain.cli.main import command_tree


def _json_commands() -> list[list[str]]:
    """Every leaf command with a --json option (or --format json), found in the app itself."""
    found: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
            return
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        if "--json" in opts:
            found.append([*path, "--json"])
        elif "--format" in opts:
            found.append([*path, "--format", "json"])

    walk(command_tree(), [])
    return found


JSON_COMMANDS = _json_commands()


def _error_document(stdout: str, exit_code: int) -> dict[str, Any]:
    doc = json.loads(stdout)  # exactly one document: two concatenated do not parse
    assert isinstance(doc, dict), stdout
    assert set(doc) == {"error", "hint", "exit"}, doc
    assert doc["exit"] == exit_code != 0
    assert doc["error"] and isinstance(doc["hint"], str)
    return doc


def test_the_commands_are_found() -> None:
    names = {" ".join(c[: c.index("--json" if "--json" in c else "--format")]) for c in JSON_COMMANDS}
    assert {"cache ls", "build", "plan", "spec validate", "matrix", "quantize", "triton lint"} <= names


@pytest.mark.parametrize("cmd", JSON_COMMANDS, ids=lambda c: "-".join(c))
def test_a_usage_error_is_a_json_document(cli: Any, cmd: list[str]) -> None:
    r = cli(*cmd, "--no-such-option")
    assert r.exit_code == 2
    doc = _error_document(r.stdout, 2)
    assert "--no-such-option" in doc["error"]
    assert "Error" in r.stderr  # the human line stays on stderr


@pytest.mark.parametrize(
    "args",
    [
        ["cache", "ls", "--json", "--registry", "/nonexistent"],
        ["cache", "verify", "--json", "--registry", "/nonexistent"],
        ["cache", "gc", "--json", "--dry-run", "--registry", "/nonexistent"],
        ["build", "{tiny}", "--all", "--json"],  # a copy of tiny.yaml whose checkpoint is missing
        ["plan", "/nonexistent/spec.yaml", "--json"],
        ["spec", "expand", "/nonexistent/spec.yaml", "--json"],
        ["matrix", "/nonexistent/spec.yaml", "--offline", "--format", "json"],
        ["deploy", "/nonexistent/spec.yaml", "--dry-run", "--json"],
        ["quantize", "--json"],
        ["up", "/nonexistent/spec.yaml", "--json"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_a_library_error_is_a_json_document(cli: Any, args: list[str], tmp_path: Path) -> None:
    tiny = copied_tiny_spec(tmp_path) if "{tiny}" in args else None
    r = cli(*(str(tiny) if a == "{tiny}" else a for a in args))
    assert r.exit_code == 2, r.output
    doc = _error_document(r.stdout, r.exit_code)
    assert f"Error: {doc['error']}" in r.stderr


def test_spec_validate_keeps_its_own_document(cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [\n")
    r = cli("spec", "validate", str(SPECS / "llama-3.1-8b-fp8.yaml"), str(bad), "--json")
    assert r.exit_code == 2
    results = json.loads(r.stdout)
    assert [x["ok"] for x in results] == [True, False]


def test_triton_lint_keeps_its_own_document(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()  # a directory with no model: lint's own document, one error finding
    r = cli("triton", "lint", tmp_path, "--json")
    assert r.exit_code == 2
    assert [f["severity"] for f in json.loads(r.stdout)] == ["error"]
    r = cli("triton", "lint", "/nonexistent", "--json")  # no repository at all: the one error document
    assert r.exit_code == 2 and json.loads(r.stdout)["error"] == "/nonexistent does not exist"


def test_without_json_stdout_stays_empty(cli: Any) -> None:
    r = cli("cache", "ls", "--registry", "/nonexistent")
    assert r.exit_code == 2 and r.stdout == ""
