"""The README's test command collects every test file, and `.ci/run` runs exactly that command.

pytest skips folders named `build`, `dist` and others by default (`norecursedirs`); a test folder with such a
name is silently never run. This test collects with the README's own command and compares against the files.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The `... -m pytest ...` line of the README's quick start (not the quick tier's, `-m "not slow"`)."""
    lines = [
        ln.strip() for ln in (REPO / "README.md").read_text().splitlines() if "-m pytest" in ln and "not slow" not in ln
    ]
    assert len(lines) == 1, f"expected one pytest command in README.md, found {lines}"
    return lines[0]


def pytest_args(command: str) -> list[str]:
    """The arguments the README passes to pytest (after `-m pytest`)."""
    words = shlex.split(command.split("&&")[-1])
    return words[words.index("pytest") + 1 :]


def readme_quick_loop() -> list[str]:
    """The quick loop's words as the README's test section writes it: `.venv/bin/pytest -q -m "not slow"`."""
    loops = re.findall(r"`(\.venv/bin/pytest [^`]*)`", (REPO / "README.md").read_text())
    assert len(loops) == 1, f"expected one `.venv/bin/pytest ...` quick loop in README.md, found {loops}"
    return shlex.split(loops[0])


def collect_as_written(words: list[str], *paths: str) -> subprocess.CompletedProcess[str]:
    """The command run as a developer types it in the checkout: the `.venv/bin/pytest` entry point (not `python -m
    pytest`, which puts the working directory on sys.path) and no PYTHONPATH, collecting only (in the process
    itself, -n0: the xdist workers would each collect the suite again)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(REPO / words[0]), *words[1:], "--collect-only", "-n0", "-p", "no:cacheprovider", *paths],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def collected_cleanly(proc: subprocess.CompletedProcess[str]) -> bool:
    """Exit 0, no `ERROR collecting` section and no error count in the closing line."""
    lines = proc.stdout.strip().splitlines()
    closing = lines[-1] if lines else ""
    return proc.returncode == 0 and "ERROR" not in proc.stdout and not re.search(r"\d+ errors?\b", closing)


def test_the_quick_loop_as_written_imports_the_shared_test_modules() -> None:
    """Measured before: `.venv/bin/pytest -q -m "not slow"` stopped with ~65 collection errors, `No module named
    'tests'`: the entry point does not put the checkout on sys.path. These files import tests.conftest,
    tests.helpers and tests.terminal.pty_harness."""
    words = readme_quick_loop()
    assert words[0] == ".venv/bin/pytest" and (REPO / words[0]).is_file()
    proc = collect_as_written(words, "tests/test_progress.py", "tests/planning/test_search.py", "tests/terminal")
    assert collected_cleanly(proc) and "tests/test_progress.py::" in proc.stdout, proc.stdout[-3000:] + proc.stderr


@pytest.mark.slow
def test_the_quick_loop_as_written_collects_the_whole_quick_tier() -> None:
    proc = collect_as_written(readme_quick_loop())
    assert collected_cleanly(proc), proc.stdout[-3000:] + proc.stderr
    quick = [line for line in proc.stdout.splitlines() if line.startswith("tests/") and "::" in line]
    assert len(quick) > 500, proc.stdout[-3000:]  # 1,105 of 1,640 when this was written


@pytest.mark.slow
def test_readme_test_command_collects_every_test_file() -> None:
    args = pytest_args(readme_test_command())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--collect-only", "-n0", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py")}
    assert on_disk, "no test files found"
    assert on_disk - collected == set(), "test files the README's command never collects"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    command = readme_test_command()
    assert re.search(r"^\s*" + re.escape(command) + r"\s*$", ci, re.MULTILINE), f".ci/run does not run `{command}`"


def test_ci_runs_the_tests_once_and_prints_the_slowest_and_the_time() -> None:
    """Measured before: .ci/run ran the quick tier and then the whole suite, which holds it (45 min against
    23 min for the suite alone on a two-core machine)."""
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines() if not ln.lstrip().startswith("#")]
    runs = [ln for ln in lines if "pytest" in ln and not ln.startswith(("echo", "export"))]
    assert runs == [readme_test_command()], f".ci/run runs pytest other than once, as the README says: {runs}"
    at = lines.index(readme_test_command())
    addopts = [ln for ln in lines[:at] if ln.startswith("export PYTEST_ADDOPTS=")]
    assert addopts and "--durations=20" in addopts[-1], "the 20 slowest tests are not printed"
    assert any(ln.startswith("echo") and "took" in ln for ln in lines[at:]), "the run's time is not printed"


@pytest.mark.slow
def test_every_server_or_validator_test_is_also_slow() -> None:
    """`pytest -m "not slow"` is the quick tier: no test in it starts a server or runs an external validator."""
    # one collection, in this process's place (-n0: no workers to start), for the three markers together
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-n0",
            "-m",
            "(server or validator or gpu) and not slow",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    leaked = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    assert proc.returncode == 5 and not leaked, f"server, validator or gpu tests outside the slow tier: {leaked[:10]}"
    assert "deselected" in proc.stdout, proc.stdout[-2000:]  # it collected the suite (not an error exit 5)


def test_ci_checks_lint_format_and_types_before_the_tests() -> None:
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    tests_at = lines.index(readme_test_command())
    for check in (".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy"):
        at = next(i for i, ln in enumerate(lines) if ln.startswith(check))
        assert at < tests_at, f"{check} runs after the tests"
    import tomllib

    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["strict"] is True
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    with_python = {Path(f).parts[0] if len(Path(f).parts) > 1 else f for f in tracked}
    # triton_repo/: one model.py per model, all named `model`, which one mypy run cannot hold (.ci/run
    # checks them one by one).
    per_file = {"triton_repo"}
    commands = [(i, ln) for i, ln in enumerate(lines) if not ln.startswith("#")]
    for d in per_file:
        at = next((i for i, ln in commands if ".venv/bin/mypy --strict" in ln and f"{d}/" in ln), len(lines))
        assert at < tests_at, f".ci/run does not type-check {d}/ before the tests"
    unchecked = with_python - set(mypy["files"]) - per_file
    assert with_python and not unchecked, f"mypy does not check {unchecked}"
