"""Load an engine spec from YAML with errors that name the file, the YAML path and the line."""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from toolchain.errors import SpecError, SpecProblem
from toolchain.specs.models import EngineSpec


def _node_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (or of its nearest existing parent)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                return line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _check_duplicates(node: yaml.Node | None, file: str, path: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"<{k.id}>"
            if key in seen:
                raise SpecError(
                    f"key {_quoted(key)} appears twice",
                    file=file,
                    yaml_path=f"{path}.{_safe_key(key)}".lstrip("."),
                    line=k.start_mark.line + 1,
                )
            seen.add(key)
            _check_duplicates(v, file, f"{path}.{_safe_key(key)}")
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _check_duplicates(v, file, f"{path}[{i}]")


def _unwrap(tp: Any) -> Any:
    """The BaseModel class inside Optional[...] / list[...] annotations, if any."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(tp):
            inner = _unwrap(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
        return None
    return tp


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: Any = EngineSpec
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        model = _unwrap(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _safe_key(part: object) -> str:
    """A key as it can appear in a one-line message: plain names as they are, anything else quoted."""
    text = str(part)
    if re.fullmatch(r"[A-Za-z0-9_\-]{1,60}", text):
        return text
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _quoted(name: str) -> str:
    safe = _safe_key(name)
    return f"'{safe}'" if safe == name else safe


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{_safe_key(part)}"
    return out.lstrip(".")


def _did_you_mean(err: dict[str, Any]) -> str | None:
    """For an unknown key, the allowed key closest to it (difflib), if any is close."""
    loc = tuple(err["loc"])
    parent = _model_at(loc[:-1]) if err["type"] == "extra_forbidden" else None
    if parent is None:
        return None
    close = difflib.get_close_matches(str(loc[-1]), list(parent.model_fields), n=1, cutoff=0.6)
    return close[0] if close else None


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        name = str(loc[-1])
        if parent is not None:
            allowed = list(parent.model_fields)
            close = _did_you_mean(err)
            hint = f"did you mean '{close}'?" if close else f"allowed: {', '.join(allowed)}"
            return f"unknown key {_quoted(name)}; {hint}"
        return f"unknown key {_quoted(name)}"
    if err["type"] == "missing":
        return f"required key '{loc[-1]}' is missing"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if "input" in err and err["type"] not in ("model_type",) and not isinstance(err["input"], dict | list):
        got = repr(err["input"])
        msg += f" (got {got[:60] + '...' if len(got) > 60 else got})"
    return msg


# At most this many problems are written out in the one-line message; the error's ``problems`` (and `spec validate
# --json`) hold every one.
MAX_PROBLEMS_IN_MESSAGE = 8


def _problems(e: ValidationError, root: yaml.Node | None) -> tuple[SpecProblem, ...]:
    """Every problem pydantic found, unknown keys first (a typo's did-you-mean explains the "required key is
    missing" it causes), each with its YAML path and line."""
    errors: list[dict[str, Any]] = [dict(err) for err in e.errors()]
    errors.sort(key=lambda err: err["type"] != "extra_forbidden")  # stable: pydantic's order within each kind
    out = []
    for err in errors:
        loc: tuple[Any, ...] = tuple(err["loc"])
        unknown = err["type"] == "extra_forbidden"
        out.append(
            SpecProblem(
                _message(err),
                _format_loc(loc) or None,
                _node_line(root, loc),
                key=str(loc[-1]) if unknown and loc else None,
                did_you_mean=_did_you_mean(err),
            )
        )
    return tuple(out)


def _validation_error(e: ValidationError, root: yaml.Node | None, file: str) -> SpecError:
    """One SpecError naming every problem: the first one where the message starts, then each other one with its
    path and line ("also matrix (line 20): required key 'max_batch_size' is missing")."""
    problems = _problems(e, root)
    first, rest = problems[0], problems[1:]
    message = first.message
    for p in rest[:MAX_PROBLEMS_IN_MESSAGE]:
        where = " ".join(w for w in (p.yaml_path, f"(line {p.line})" if p.line is not None else None) if w)
        also = " Also" if message.endswith(("?", ".")) else "; also"
        message += f"{also} {where}: {p.message}" if where else f"{also}: {p.message}"
    if len(rest) > MAX_PROBLEMS_IN_MESSAGE:
        message += f"; and {len(rest) - MAX_PROBLEMS_IN_MESSAGE} more (`toolchain spec validate SPEC --json` lists all)"
    return SpecError(message, file=file, yaml_path=first.yaml_path, line=first.line, problems=problems)


# Limits that keep every spec answer fast and bounded (a real spec is ~40 lines, 3 levels deep).
MAX_SPEC_BYTES = 256_000
MAX_DEPTH = 32
MAX_NODES = 5_000


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and explicit tags, and caps nesting and node count.

    Aliases are how a few bytes of YAML expand into billions of nodes ("billion laughs") or into
    a cycle; no engine spec needs them. The composer is recursive, so depth is capped before Python's
    own recursion limit is reached.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(problem="YAML aliases (*name) are not allowed in a spec", problem_mark=mark)
        if getattr(event, "anchor", None) is not None:
            raise yaml.MarkedYAMLError(problem="YAML anchors (&name) are not allowed in a spec", problem_mark=mark)
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!":
            raise yaml.MarkedYAMLError(
                problem=f"explicit YAML tags ({tag}) are not allowed in a spec", problem_mark=mark
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise yaml.MarkedYAMLError(problem=f"more than {MAX_NODES} YAML nodes", problem_mark=mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def safe_yaml(text: str) -> Any:
    """Plain data from small YAML files next to specs (runner maps...), with the spec loader's limits:
    no anchors, aliases or tags, bounded depth, nodes and size. Raises yaml.YAMLError or ValueError."""
    if len(text) > MAX_SPEC_BYTES:
        raise ValueError(f"{len(text):,} characters; at most {MAX_SPEC_BYTES:,}")
    return _compose(text)[1]


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    loader = _SpecLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()
    return root, data


# Fields that are free text: a line break or tab there is text. Everywhere else (paths, names, versions, image
# references) it is a mistake that would surface much later (a model.source ending in a newline was accepted and
# `build` then said "checkpoint not found").
FREE_TEXT = {("description",)}


def _control(c: str) -> bool:
    return ord(c) < 32 or ord(c) == 127


def _bad_string(data: Any, loc: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str] | None:
    """Where the first string (value or key) holds a control character (NUL, or a line break or tab outside the
    free-text fields), and which."""
    if isinstance(data, str):
        allowed = "\t\n\r" if loc in FREE_TEXT else ""
        bad = next((c for c in data if _control(c) and c not in allowed), None)
        return (loc, bad) if bad is not None else None
    if isinstance(data, dict):
        for k, v in data.items():
            got = _bad_string(k, (*loc, k)) or _bad_string(v, (*loc, k))
            if got is not None:
                return got
    if isinstance(data, list):
        for i, v in enumerate(data):
            got = _bad_string(v, (*loc, i))
            if got is not None:
                return got
    return None


def _subnormal(data: Any, loc: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], float] | None:
    """Where the first subnormal number is (non-zero, below 2.2e-308, such as 1e-320): no spec value means one,
    and the planner's arithmetic turns them into inf or 0 (1 / 1e-320 overflows)."""
    if isinstance(data, float):
        return (loc, data) if data != 0 and abs(data) < sys.float_info.min else None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        got = _subnormal(v, (*loc, k))
        if got is not None:
            return got
    return None


_CONTROL_NAMES = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}


def parse_spec_text(text: str, file: str = "<string>") -> EngineSpec:
    """Parse and validate spec YAML text; every failure is a one-line SpecError."""
    if not text.strip():
        raise SpecError("the file is empty; an engine spec is a YAML mapping", file=file)
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(f"is {len(text):,} characters; an engine spec is at most {MAX_SPEC_BYTES:,}", file=file)
    try:
        root, data = _compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"not valid YAML: {problem}", file=file, line=line) from e
    except (ValueError, OverflowError, TypeError) as e:
        # SafeLoader's constructors (timestamps, base64, sets of unhashable keys) raise these.
        raise SpecError(f"not valid YAML: {type(e).__name__}: {str(e)[:120]}", file=file) from e
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"top level is {kind}; an engine spec is a YAML mapping", file=file, line=1)
    _check_duplicates(root, file)
    if any(not isinstance(k, str) for k in data):
        raise SpecError("every top-level key must be a string", file=file, line=1)
    bad = _bad_string(data)
    if bad is not None:
        where, char = bad
        what = _CONTROL_NAMES.get(char, f"the control character {char!r}")
        raise SpecError(
            f"holds {what}; only description is free text, every other value is one plain line",
            file=file,
            yaml_path=_format_loc(where) or None,
            line=_node_line(root, where),
            hint='remove it (a block scalar `|` or a quoted "...\\n" keeps the line break), then validate again',
        )
    try:
        spec = EngineSpec.model_validate(data)
    except ValidationError as e:
        raise _validation_error(e, root, file) from e
    # on the validated values: YAML reads 1e-320 (no dot) as a string, which pydantic then turns into a float
    tiny = _subnormal(spec.model_dump())
    if tiny is not None:
        where, value = tiny
        raise SpecError(
            f"{value!r} is subnormal (non-zero but below {sys.float_info.min:.1e}), too small to compute with",
            file=file,
            yaml_path=_format_loc(where) or None,
            line=_node_line(root, where),
            hint="give a realistic value (or 0 where the field allows it), then `toolchain spec validate SPEC`",
        )
    return spec


def load_spec(path: str | Path) -> EngineSpec:
    """Read and validate one spec file."""
    p = Path(path)
    try:
        if not p.exists():
            raise SpecError("no such file", file=p, hint="check the path; specs live in engine_specs/")
        if p.is_dir():
            raise SpecError("is a directory, not a spec file", file=p, hint=f"pass a file, e.g. {p}/<name>.yaml")
        if p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"is larger than {MAX_SPEC_BYTES:,} bytes; an engine spec is a small YAML file", file=p)
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror or e}", file=p) from e
    except ValueError as e:  # a NUL byte in the path
        raise SpecError(f"cannot read: {e}", file=repr(str(p))) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError("is not UTF-8 text; an engine spec is a YAML file", file=p) from exc
    return parse_spec_text(text, str(p)).with_base_dir(p.resolve().parent)
