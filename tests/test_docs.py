"""What the code and the README cite lives in this repository's docs/, and nothing cites papers outside it."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

# A path into a directory beside the repository, or the notes this project was started from.
OUTSIDE = re.compile(
    r"\.\./shared|\bshared/(facts|seeds)|\bfacts/[\w-]+\.md|\bfacts §|\bseed (documents?|cookbook)", re.I
)
DOC_REF = re.compile(r"\bdocs/([\w.-]+\.md)")


def _tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = [n for n in out.splitlines() if not n.endswith((".png", ".safetensors", ".json"))]
    return [n for n in names if (REPO / n).is_file()]


def test_nothing_cites_documents_outside_the_repository() -> None:
    offenders = []
    for name in _tracked_text_files():
        if name == "tests/test_docs.py":
            continue
        for n, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{n}: {line.strip()[:100]}")
    assert offenders == []


def test_every_cited_doc_exists() -> None:
    """Code, tests and the README cite docs/ of this repository (docs themselves also cite upstream docs/)."""
    missing = set()
    for name in _tracked_text_files():
        if name.startswith("docs/"):
            continue
        for ref in DOC_REF.findall((REPO / name).read_text(errors="replace")):
            if not (REPO / "docs" / ref).is_file():
                missing.add(f"{name} cites docs/{ref}")
    assert missing == set()


def test_docs_index_lists_every_page_and_names_real_code() -> None:
    """docs/README.md is the one hop from a question to its page and its code: it lists every page, and
    every path it names exists."""
    index = (REPO / "docs" / "README.md").read_text()
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    assert pages - linked == set(), "add the page to docs/README.md"
    assert linked - pages == set()
    named = re.findall(r"`((?:toolchain|scripts|ci|tests|benchmarks)/[\w./-]*)`", index)
    assert named, "the index names the code for each question"
    assert [p for p in named if not (REPO / p).exists()] == []
