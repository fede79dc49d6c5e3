"""The worked capacity example of docs/capacity.md runs as written on what the project ships: the block is read
out of the page (a drifting page fails here), each command runs, every line the page shows below a command is in
its output, and the knee lands at the stand-in's slot count.

Decimal figures vary from run to run, so a shown decimal matches any decimal; integers (the knee, the slots, the
GPU count) must be as shown. The page's port is replaced by a free one.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_tiny_spec
from tests.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.server]

PAGE = REPO / "docs" / "capacity.md"
MARKER = "<!-- capacity-example:"
PORT = "37021"


def example_block() -> list[tuple[str, list[str]]]:
    """The page's example: each ``$ command`` with the lines shown below it (``…`` lines left out)."""
    text = PAGE.read_text()
    assert MARKER in text, f"{PAGE} lost its capacity example block"
    body = text.split(MARKER, 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and line.strip() != "…":
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
    return steps


def shown(line: str) -> re.Pattern[str]:
    """A shown line as a pattern: its decimals match any decimal, everything else is literal."""
    return re.compile(r"\d+\.\d+".join(re.escape(part) for part in re.split(r"\d+\.\d+", line)))


def missing(lines: list[str], output: str) -> list[str]:
    return [line for line in lines if not shown(line).search(output)]


def test_shown_lines_match_by_their_text_and_integers() -> None:
    out = "SLO search: knee at concurrency 3 (71.4 output tok/s, 7.14 req/s); concurrency 4 misses the SLOs"
    assert not missing(["SLO search: knee at concurrency 3 (62.0 output tok/s, 6.20 req/s); concurrency 4"], out)
    assert missing(["SLO search: knee at concurrency 5 (62.0 output tok/s, 6.20 req/s)"], out)


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "toolchain", f"the example runs toolchain commands only: {command!r}"
    return [sys.executable, "-m", "toolchain.cli.main", *words[1:]]


def _first_line(proc: subprocess.Popen[str], limit_s: float) -> str:
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], limit_s)
    assert ready, f"the stand-in said nothing in {limit_s:g} s"
    return proc.stderr.readline()


def test_the_capacity_example_runs_as_the_page_shows(tiny_checkpoint: Path, tmp_path: Path) -> None:
    port, work = str(free_port()), tmp_path / "work"  # $WORK: where the page's example writes (mktemp -d)
    work.mkdir()

    def here(text: str) -> str:
        return text.replace(PORT, port).replace("$WORK", str(work))

    steps = [(here(c), [here(x) for x in shown_]) for c, shown_ in example_block()]
    assert [c.split()[1] for c, _ in steps] == ["bench", "bench", "plan", "bench"], steps
    (tmp_path / "engine_specs").mkdir()
    write_tiny_spec(tmp_path / "engine_specs" / "tiny.yaml", tiny_checkpoint)  # tiny.yaml, its checkpoint made here
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    background = [c for c, _ in steps if c.endswith(" &")]
    assert len(background) == 1 and steps[0][0] == background[0], "the page starts the stand-in in the background"
    standin = subprocess.Popen(
        _argv(steps[0][0].removesuffix(" &")),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready = _first_line(standin, 60)
        assert not missing(steps[0][1], ready), (steps[0][1], ready)
        for command, lines in steps[1:]:
            r = subprocess.run(_argv(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            out = r.stdout + r.stderr
            want = 2 if lines and lines[0].startswith("Error:") else 0
            assert r.returncode == want, f"{command}\nexit {r.returncode}\n{out[-3000:]}"
            assert "Traceback" not in out
            assert not missing(lines, out), f"{command}: the page shows lines the output lacks:\n{out[-4000:]}"
    finally:
        standin.terminate()  # SIGTERM: a clean stop, as Ctrl-C
        try:
            rest = standin.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            standin.kill()
            rest = standin.communicate()[1]
    assert standin.returncode == 0, rest
    assert "stand-in stopped:" in rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine_specs", "work"]  # nothing outside $WORK
    search = json.loads((work / "knee.json").read_text())["search"]
    assert search["status"] == "found", search["message"]
    assert search["knee"]["load"] == 3 and search["knee"]["first_failing_load"] == 4  # --slots 3: the knee exactly
    assert (work / "knee-report" / "slo_search.png").is_file()
