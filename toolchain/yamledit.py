"""Change a few values of a YAML file a person wrote, keeping every comment and line it does not change.

PyYAML drops comments on a load and dump, and ruamel.yaml is not a dependency. The files edited here are
the toolchain's specs: block mappings at the top level, their values plain scalars, block mappings or one-line
flow collections. :func:`edit` rewrites only the lines of the keys it sets (a scalar in place, keeping its
trailing comment; a block or flow value re-written at its indentation) and then checks its work: the edited
text must load to exactly the wanted data. Where it cannot (a layout it does not handle), the caller gets None
and writes the whole document instead.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from toolchain import yamlout

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?P<rest>.*)$")


def _flow(value: Any) -> str:
    text = yamlout.dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _block(key: str, value: Any, indent: int) -> list[str]:
    text = yamlout.dump({key: value}, allow_unicode=True)
    return [" " * indent + line for line in text.splitlines()]


def _split_comment(rest: str) -> tuple[str, str]:
    """(value, " # comment") of what follows a key's colon; a '#' inside quotes is part of the value."""
    m = re.search(r"\s+#.*$", rest)
    if m and rest.count('"', 0, m.start()) % 2 == 0 and rest.count("'", 0, m.start()) % 2 == 0:
        return rest[: m.start()].strip(), rest[m.start() :]
    return rest.strip(), ""


def _children(lines: list[str], at: int, indent: int) -> int:
    """The end (exclusive) of the block under the key on line ``at``: the lines indented deeper, blank lines
    and comments inside it; comments and blanks just before the next key belong to that key."""
    end = at + 1
    last = at
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            if len(line) - len(line.lstrip(" ")) <= indent:
                break
            last = end
        end += 1
    return last + 1


def _find(lines: list[str], start: int, end: int, key: str, indent: int | None) -> tuple[int, int] | None:
    """(line, indent) of ``key`` between ``start`` and ``end`` at the shallowest indentation there."""
    for i in range(start, end):
        m = _KEY.match(lines[i])
        if m and m.group("key") == key and (indent is None or len(m.group("indent")) == indent):
            return i, len(m.group("indent"))
    return None


def _set(lines: list[str], path: list[str], value: Any, start: int, end: int, indent: int) -> bool:
    """Set ``path`` (relative to the block ``start``..``end`` at ``indent``) to ``value`` in ``lines``."""
    found = _find(lines, start, end, path[0], indent)
    if found is None:
        if len(path) > 1:
            return False
        lines[end:end] = _block(path[0], value, indent)
        return True
    i, ind = found
    m = _KEY.match(lines[i])
    assert m is not None
    rest, comment = _split_comment(m.group("rest"))
    stop = _children(lines, i, ind)
    if len(path) > 1:
        if rest:  # a one-line flow mapping: the whole of it, re-written by the caller
            return False
        child = next(
            (len(x) - len(x.lstrip(" ")) for x in lines[i + 1 : stop] if x.strip() and not x.strip().startswith("#")),
            ind + 2,
        )
        return _set(lines, path[1:], value, i + 1, stop, child)
    if rest:  # a scalar or a one-line flow collection: stays one line, its comment kept
        lines[i] = f"{m.group('indent')}{path[0]}: {_flow(value)}{comment}"
        return True
    lines[i:stop] = _block(path[0], value, ind)
    return True


def edit(text: str, changes: list[tuple[list[str], Any]], want: dict[str, Any]) -> str | None:
    """``text`` with each (key path, value) of ``changes`` set, every other line as it was; None when the result
    would not load to ``want`` (then write the whole document)."""
    lines = text.splitlines()
    for path, value in changes:
        if not _set(lines, path, value, 0, len(lines), 0):
            # a parent written as a one-line flow mapping, or missing: re-write that top-level key whole
            top = path[0]
            if top not in want or not _set(lines, [top], want[top], 0, len(lines), 0):
                return None
    out = "\n".join(lines) + "\n"
    try:
        loaded = yaml.safe_load(out)
    except yaml.YAMLError:
        return None
    return out if loaded == want else None
