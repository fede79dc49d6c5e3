"""A Typer command whose options are the fields of a pydantic model: the model declares each flag once (its name,
type, default and help), and the command is built from it when the CLI starts.

A field ``shared_prefix`` is the option ``--shared-prefix``; a bool that defaults to true is ``--x/--no-x``, one
that defaults to false the flag ``--x``; a ``Literal`` is a choice. The parser only parses: a value out of its
field's bounds, and a required field left out, are the model's one-line errors naming the flag and the fix
(``--workers must be from 1 to 256 processes, not 0``, ``--url is required``), not the parser's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _choice(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum of a Literal's values, which Typer shows and checks as a choice."""
    return Enum(name.title().replace("_", ""), {v: v for v in values}, type=str)  # type: ignore[return-value]


def _parameter(name: str, field: FieldInfo) -> inspect.Parameter:
    annotation: Any = field.annotation
    optional = False
    if get_origin(annotation) in (Union, type(int | None)):
        args = [a for a in get_args(annotation) if a is not type(None)]
        annotation, optional = args[0], True
    if get_origin(annotation) is Literal:
        annotation = _choice(name, get_args(annotation))
    decl = option_name(name)
    if annotation is bool and field.default is True:
        decl = f"{decl}/--no-{name.replace('_', '-')}"
    default = None if field.is_required() else field.default
    if isinstance(default, str) and isinstance(annotation, type) and issubclass(annotation, Enum):
        default = annotation(default)
    hint = annotation | None if optional or field.is_required() else annotation
    option = typer.Option(decl, help=field.description)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[hint, option], default=default)


def model_options(model: type[BaseModel]) -> list[inspect.Parameter]:
    """One keyword-only Typer parameter per field of ``model``, in the model's order."""
    return [_parameter(name, field) for name, field in model.model_fields.items()]


def values(model: type[BaseModel], given: dict[str, Any]) -> dict[str, Any]:
    """The model's fields among the parsed parameters, as the model takes them: choices as their text, and a
    field the command line left out only where the model has a default (a required one left out is the model's
    error)."""
    out = {}
    for name, field in model.model_fields.items():
        v = given[name]
        if isinstance(v, Enum):
            v = v.value
        if v is None and field.is_required():
            continue
        out[name] = v
    return out


def with_parameters(func: Callable[..., Any], params: list[inspect.Parameter]) -> Callable[..., Any]:
    """``func`` (taking ``**kwargs``) with ``params`` as the signature Typer reads."""
    func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return func
