"""The one way a command writes a directory (``--out DIR``): checked, staged, marked, renamed into place.

Every directory-writing command (``deploy``, ``dynamo deploy``, ``triton emit``, ``bench report``,
``matrix --out``, ``cache keygen``) writes through :func:`owned_output`:

- a missing directory is created; an empty one is replaced;
- a non-empty one is refused unless the command was given ``--force``;
- with ``--force`` it is replaced only when everything in it is the toolchain's own output: the directory
  carries the ownership marker (:data:`MARKER`, JSON naming the command and every file it wrote) and holds no
  file the marker does not list. Any other file is refused with its path, and nothing is deleted;
- the new content is written into a staging directory beside the destination and renamed over it
  (:func:`toolchain.digest.staged_dir`), so a failed or interrupted run leaves the old output as it was.

The marker has no ``.yaml``/``.json`` suffix: ``kubectl apply -R -f DIR`` skips it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from toolchain.digest import check_replaceable, staged_dir
from toolchain.errors import OutputExistsError, UserInputError

__all__ = ["MARKER", "check_output", "final_path", "foreign_files", "owned_output", "write_output"]

MARKER = ".toolchain-output"


def _entries(root: Path) -> list[str]:
    """Every non-directory entry under ``root`` (links included, never followed), relative and sorted."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]  # a link to a directory is an entry, not a tree
        found += [(here / n).relative_to(root).as_posix() for n in (*filenames, *links)]
    return sorted(found)


def _listed(out: Path) -> set[str] | None:
    """The files the marker in ``out`` says the toolchain wrote; None without a readable marker."""
    marker = out / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def foreign_files(out: Path) -> list[Path]:
    """What in ``out`` the toolchain did not write: everything, when ``out`` carries no marker."""
    listed = _listed(out)
    entries = [e for e in _entries(out) if e != MARKER]
    if listed is None:
        return [out / e for e in entries] or [out]
    return [out / e for e in entries if e not in listed and not _bytecode_of(e, listed)]


def _bytecode_of(entry: str, listed: set[str]) -> bool:
    """Whether ``entry`` is Python's bytecode of a file the toolchain wrote (``d/__pycache__/m.cpython-311.pyc`` of
    a listed ``d/m.py``): the interpreter that ran it (Triton's Python-backend stub loading a repository's
    ``model.py``) wrote it, derived from the toolchain's own file, so it is the toolchain's output too."""
    path = Path(entry)
    if path.parent.name != "__pycache__" or path.suffix != ".pyc":
        return False
    source = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
    return source.as_posix() in listed


def check_output(out: Path, *, force: bool | None, flag: str = "--out", keep_hint: str | None = None) -> Path:
    """The resolved ``out``, when the command may write it; else a one-line error naming the fix.

    ``force``: whether ``--force`` was given; None for a command that never replaces its output (``keep_hint``
    then says what to do instead)."""
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise UserInputError(f"{out} is a file, not a directory", f"give {flag} a new or empty directory")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    for d in (parent, out) if out.exists() else (parent,):
        if not os.access(d, os.W_OK | os.X_OK):
            raise UserInputError(f"cannot write into {d}: permission denied", f"give {flag} a directory you can write")
    if not out.exists() or not any(out.iterdir()):
        return out
    if not force:
        raise OutputExistsError(
            f"{out} is not empty",
            keep_hint or f"choose another {flag}, or pass --force to replace the toolchain's earlier output there",
        )
    check_replaceable(out, None, flag)  # never the working or the home directory
    foreign = foreign_files(out)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        what = f"{out} (no {MARKER} in it)" if foreign == [out] else f"{foreign[0]}{more}"
        raise UserInputError(
            f"the toolchain did not write {what}; --force replaces only its own output",
            f"move it out of {out}, or give {flag} a new or empty directory",
        )
    return out


@contextlib.contextmanager
def owned_output(
    out: Path, *, command: str, force: bool | None, flag: str = "--out", keep_hint: str | None = None
) -> Iterator[Path]:
    """Check ``out`` (:func:`check_output`), then yield a staging directory to fill; when the block succeeds
    the marker is written and the staging directory renamed over ``out``; when it fails nothing changes."""
    out = check_output(out, force=force, flag=flag, keep_hint=keep_hint)
    with staged_dir(out, label="partial") as tmp:
        yield tmp
        doc = {"written_by": f"toolchain {command}", "files": _entries(tmp)}
        (tmp / MARKER).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def write_output(
    out: Path, fill: Callable[[Path], dict[str, Path]], *, command: str, force: bool | None, flag: str = "--out"
) -> dict[str, Path]:
    """:func:`owned_output` for a writer that fills a directory and returns what it wrote, by name: those files
    where they lie once ``out`` is in place."""
    out = Path(out).resolve()
    with owned_output(out, command=command, force=force, flag=flag) as tmp:
        written = fill(tmp)
    return {name: final_path(p, tmp, out) for name, p in written.items()}


def final_path(path: Path, tmp: Path, out: Path) -> Path:
    """Where ``path``, written under the staging directory ``tmp``, lies once renamed to ``out``."""
    return out / path.relative_to(tmp)
