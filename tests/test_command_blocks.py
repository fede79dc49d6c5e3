"""Every command block of README.md and docs/*.md runs here and prints what it shows.

The convention (docs/README.md, "Command blocks"): a fenced block is a command block when its info string is
``console``, ``bash``, ``sh`` or ``shell``, or when a line of it starts with ``$ ``. In a ``console`` block each
``$ `` line is a command and the lines under it are what it prints; a line ``...`` stands for any number of
lines and ``...`` inside a line for any text; a line starting with ``#`` is a comment. A command with nothing
under it is run, and must exit 0, but what it prints is not compared. Shown output with an ``Error:`` line means
the command must exit non-zero; otherwise it must exit 0. In a ``bash``/``sh`` block every line is a command.

A block runs unless the HTML comment on the line before its fence tags it:
``<!-- command-block: slow -->`` runs it only with the slow tests; ``<!-- command-block: skip REASON: why -->``
does not run it, and REASON must be one of ``SKIP_REASONS``. The blocks of one page run in order, in one shell
(``export`` and ``cd`` carry over), in a fresh directory holding a copy of ``engine_specs/`` and ``tests/specs/``
and the tiny checkpoint at ``.work/tiny-llama`` (where ``engine_specs/tiny.yaml`` looks for it), with every home
and cache path in tmp, ``COLUMNS=80`` and nothing that reaches past 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, SPECS

# Why a block may not run here; a tag naming anything else fails the test.
SKIP_REASONS = {
    "gpu": "needs an NVIDIA GPU and TensorRT-LLM",
    "cluster": "needs a Kubernetes cluster",
    "docker": "needs Docker (a container build or login)",
    "network": "reaches a host other than 127.0.0.1 (the Hub, S3, a remote registry)",
    "server": "talks to a server started in another block or by hand",
    "foreground": "runs until Ctrl-C (a server)",
    "setup": "installs onto the machine (scripts/setup.sh); tests/test_layout.py and .ci/run hold these commands",
    "template": "a synopsis with names to fill in (SPEC, ID, KEY, host)",
}

# Pages other changes are rewriting right now: their blocks are parsed (a tag must still be well formed) but
# not yet run. Tag their blocks and remove them from this list once those changes are merged.
MIGRATING: set[str] = set()

COMMAND_INFO = {"console", "bash", "sh", "shell"}
TAG = re.compile(r"^<!--\s*command-block:\s*(?P<body>.*?)\s*-->$")
ELLIPSIS = "..."
BLOCK_TIMEOUT_S = 900  # a hang guard for one page's shell, not a performance bound


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` in its page
    text: str
    shown: list[str] = field(default_factory=list)
    compare: bool = True  # False in bash/sh blocks: the output is not shown, so not compared


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    info: str
    tag: str | None  # None (run), "slow", or "skip REASON: why"
    commands: list[Command]

    @property
    def skip_reason(self) -> str | None:
        if self.tag and self.tag.startswith("skip"):
            m = re.match(r"skip\s+([\w-]+)", self.tag)
            return m.group(1) if m else ""
        return None


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def page_name(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def parse(text: str, page: str) -> list[Block]:
    """The command blocks of one Markdown page, with their tags and commands."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(`{3,})\s*([\w-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        body = lines[i + 1 : j]
        i = j + 1
        if info not in COMMAND_INFO and not any(b.startswith("$ ") for b in body):
            continue
        prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        t = TAG.match(prev)
        blocks.append(Block(page, start + 1, info, t.group("body") if t else None, _commands(body, start + 2, info)))
    return blocks


def _commands(body: list[str], first_line: int, info: str) -> list[Command]:
    cmds: list[Command] = []
    shell_only = info in {"bash", "sh", "shell"} and not any(b.startswith("$ ") for b in body)
    k = 0
    while k < len(body):
        ln = body[k]
        if shell_only:
            if ln.strip() and not ln.lstrip().startswith("#"):
                cmds.append(Command(first_line + k, ln, compare=False))
            k += 1
            continue
        if ln.startswith("$ "):
            text, start = ln[2:], k
            while text.endswith("\\") and k + 1 < len(body):
                k += 1
                text += "\n" + body[k]
            cmds.append(Command(first_line + start, text))
        elif ln.lstrip().startswith("#"):
            pass  # a comment
        elif cmds:
            cmds[-1].shown.append(ln.rstrip())
        k += 1
    return cmds


def check_tag(block: Block) -> str | None:
    """What is wrong with the block's tag, or None."""
    if block.tag is None or block.tag == "slow":
        return None
    reason = block.skip_reason
    if reason is None:
        return f"unknown tag {block.tag!r}: use `slow` or `skip REASON: why`"
    if reason not in SKIP_REASONS:
        return f"skip reason {reason!r} is not one of {sorted(SKIP_REASONS)}"
    return None


# --- matching shown output against what the command printed -------------------------------------------------


def _line_pattern(shown: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in shown.split(ELLIPSIS)]
    return re.compile(".*?".join(parts))


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether the printed lines are what the block shows: a line starting with `...` stands for any lines, `...`
    inside a line for any text; trailing spaces and blank lines at either end do not count."""
    want = _trim(shown)
    got = _trim([p.rstrip() for p in printed])
    pats = [None if w.startswith(ELLIPSIS) and (w == ELLIPSIS or w[3:4] == " ") else _line_pattern(w) for w in want]

    @cache
    def m(i: int, j: int) -> bool:
        if i == len(pats):
            return j == len(got)
        p = pats[i]
        if p is None:
            return any(m(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and p.fullmatch(got[j]) is not None and m(i + 1, j + 1)

    return m(0, 0)


def _trim(lines: list[str]) -> list[str]:
    lines = [ln.rstrip() for ln in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


# --- running a page ------------------------------------------------------------------------------------------


def _workdir(tmp: Path, tiny: Path | None) -> tuple[Path, dict[str, str]]:
    work = tmp / "work"
    shutil.copytree(SPECS, work / "engine_specs")
    shutil.copytree(FIXTURES, work / "tests" / "specs", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    if tiny is not None:
        (work / ".work").mkdir()
        (work / ".work" / "tiny-llama").symlink_to(tiny, target_is_directory=True)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "toolchain"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m toolchain.cli.main "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]),
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",  # stdout and stderr interleave as on a terminal
        COLUMNS="80",
        TERM="dumb",
        NO_PROXY="127.0.0.1,localhost",
    )
    for var in ("TOOLCHAIN_OCI_PLAIN_HTTP", "TOOLCHAIN_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "FORCE_COLOR"):
        env.pop(var, None)
    return work, env


def run_page(blocks: list[Block], work: Path, env: dict[str, str]) -> list[tuple[Command, int, list[str]]]:
    """Run every command of the blocks in one bash, in order; each command's exit code and printed lines."""
    token = "@@cmd-" + secrets.token_hex(8)
    cmds = [c for b in blocks for c in b.commands]
    script = ["exec 2>&1 </dev/null"]
    for n, c in enumerate(cmds):
        script += [c.text, f"printf '\\n{token} {n} %d\\n' $?"]
    proc = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a command's children (tritonserver) go with it if the shell is stopped
    )
    try:
        stdout, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    results: list[tuple[Command, int, list[str]]] = []
    chunk: list[str] = []
    for ln in stdout.splitlines():
        m = re.fullmatch(re.escape(token) + r" (\d+) (\d+)", ln)
        if m:
            results.append((cmds[int(m.group(1))], int(m.group(2)), chunk))
            chunk = []
        else:
            chunk.append(ln)
    assert len(results) == len(cmds), f"the shell stopped after {len(results)} of {len(cmds)} commands"
    return results


def failures(results: list[tuple[Command, int, list[str]]], page: str) -> list[str]:
    bad = []
    for c, rc, printed in results:
        where = f"{page}:{c.line}: $ {c.text.splitlines()[0]}"
        wants_error = any(s.startswith("Error:") for s in c.shown)
        if wants_error and rc == 0:
            bad.append(f"{where}\n  shows an Error: but exited 0")
        elif not wants_error and rc != 0:
            bad.append(f"{where}\n  exited {rc}:\n" + "\n".join("    " + p for p in printed[-15:]))
        elif c.compare and c.shown and not matches(c.shown, printed):
            bad.append(f"{where}\n  printed (put this in the page, with ... for what varies):\n" + "\n".join(printed))
    return bad


def _page_params() -> list[object]:
    params: list[object] = []
    for p in pages():
        name = page_name(p)
        blocks = parse(p.read_text(), name)
        if not blocks:
            continue
        slow = any(b.tag == "slow" for b in blocks)
        params.append(pytest.param(name, id=name, marks=[pytest.mark.slow] if slow else []))
    return params


# --- the tests -----------------------------------------------------------------------------------------------


def test_every_command_block_is_run_or_tagged_with_a_known_reason() -> None:
    blocks = [b for p in pages() for b in parse(p.read_text(), page_name(p))]
    assert len([b for b in blocks if b.page == "README.md"]) >= 1, "the README's worked path is a command block"
    bad = [f"{b.page}:{b.line}: {e}" for b in blocks if (e := check_tag(b))]
    bad += [f"{b.page}:{b.line}: a command block with no command" for b in blocks if not b.commands]
    assert bad == []


def test_the_convention_page_lists_every_skip_reason() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    section = index[index.index("## Command blocks") :]
    assert [r for r in SKIP_REASONS if f"`{r}`" not in section] == []


@pytest.mark.parametrize("page", _page_params())
def test_command_blocks_print_what_they_show(page: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A page with a slow-tagged block is a slow test; it runs every block of the page that is not skipped."""
    if Path(page).name in MIGRATING and page.startswith("docs/"):
        pytest.skip(f"{page} is being rewritten by another change; tag its blocks, then drop it from MIGRATING")
    blocks = [b for b in parse((REPO / page).read_text(), page) if b.skip_reason is None]
    if not blocks:
        pytest.skip(f"every command block of {page} is tagged skip")
    needs_tiny = any("tiny" in c.text for b in blocks for c in b.commands)
    tiny = request.getfixturevalue("tiny_checkpoint") if needs_tiny else None
    work, env = _workdir(tmp_path, tiny)
    before = _files(work)
    bad = failures(run_page(blocks, work, env), page)
    assert not bad, "\n\n".join(bad)
    left = sorted({path.split(os.sep)[0] for path in _files(work) - before})
    assert left == [], (
        f"{page} leaves {left} in the reader's checkout: write under $WORK (mktemp -d) or $TOOLCHAIN_CACHE"
    )


def _files(work: Path) -> set[str]:
    """Every path under the page's directory (the reader's checkout), links not followed."""
    out = set()
    for root, dirs, files in os.walk(work):
        out |= {os.path.relpath(os.path.join(root, n), work) for n in [*dirs, *files]}
    return out


# --- the matcher and parser themselves -----------------------------------------------------------------------


def test_matching_elides_lines_and_text_but_nothing_else() -> None:
    printed = ["[   0.1s] planning cell a", "[   0.2s] emitting", "wrote deploy for tiny: 1..2 replica(s)"]
    assert matches(["[...] planning cell a", "...", "wrote deploy for tiny: ..."], printed)
    assert matches(["...", "wrote deploy for tiny: 1..2 replica(s)"], printed)
    assert not matches(["[...] planning cell b", "..."], printed)
    assert not matches(["[...] planning cell a"], printed)  # a line left out needs `...`
    assert not matches(["...", "wrote deploy for tiny: 1..3 replica(s)"], printed)


def test_parser_reads_commands_output_comments_and_tags() -> None:
    text = (
        "intro\n<!-- command-block: skip gpu: builds an engine -->\n```console\n"
        "$ toolchain build x   # a comment\n                    # an aligned comment\nplanned a\n"
        "# a comment line\n$ toolchain a \\\n    --b\n```\n\n```bash\ntoolchain c\n# c\n```\n```yaml\nk: v\n```\n"
    )
    b1, b2 = parse(text, "p.md")
    assert b1.skip_reason == "gpu" and b1.line == 3
    assert [(c.text, c.shown) for c in b1.commands] == [
        ("toolchain build x   # a comment", ["planned a"]),
        ("toolchain a \\\n    --b", []),
    ]
    assert b2.tag is None and [(c.text, c.compare) for c in b2.commands] == [("toolchain c", False)]
    assert check_tag(Block("p", 1, "console", "skip someday", [])) is not None
    assert check_tag(Block("p", 1, "console", "later", [])) is not None
