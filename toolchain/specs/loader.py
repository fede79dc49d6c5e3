"""Load an engine spec from YAML with errors that name the file, the YAML path and the line."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from toolchain.errors import SpecError
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
            key = str(k.value)
            if key in seen:
                raise SpecError(
                    f"key '{key}' appears twice",
                    file=file,
                    yaml_path=f"{path}.{key}".lstrip("."),
                    line=k.start_mark.line + 1,
                )
            seen.add(key)
            _check_duplicates(v, file, f"{path}.{key}")
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


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        name = str(loc[-1])
        if parent is not None:
            allowed = list(parent.model_fields)
            close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}"
            return f"unknown key '{name}'; {hint}"
        return f"unknown key '{name}'"
    if err["type"] == "missing":
        return f"required key '{loc[-1]}' is missing"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if "input" in err and err["type"] not in ("model_type",) and not isinstance(err["input"], dict | list):
        msg += f" (got {err['input']!r})"
    return msg


def parse_spec_text(text: str, file: str = "<string>") -> EngineSpec:
    """Parse and validate spec YAML text; every failure is a one-line SpecError."""
    if not text.strip():
        raise SpecError("the file is empty; an engine spec is a YAML mapping", file=file)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"not valid YAML: {problem}", file=file, line=line) from e
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"top level is {kind}; an engine spec is a YAML mapping", file=file, line=1)
    _check_duplicates(root, file)
    if any(not isinstance(k, str) for k in data):
        raise SpecError("every top-level key must be a string", file=file, line=1)
    try:
        return EngineSpec.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        first = errors[0]
        loc = tuple(first["loc"])
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(
            _message(dict(first)) + more, file=file, yaml_path=_format_loc(loc) or None, line=_node_line(root, loc)
        ) from e


def load_spec(path: str | Path) -> EngineSpec:
    """Read and validate one spec file."""
    p = Path(path)
    if not p.exists():
        raise SpecError("no such file", file=p, hint="check the path; specs live in engine_specs/")
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=p, hint=f"pass a file, e.g. {p}/<name>.yaml")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", file=p) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError("is not UTF-8 text; an engine spec is a YAML file", file=p) from exc
    return parse_spec_text(text, str(p)).with_base_dir(p.resolve().parent)
