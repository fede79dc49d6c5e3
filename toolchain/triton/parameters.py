"""Every ``parameters`` key the 1.1 ``inflight_batcher_llm`` models read, and what each accepts.

The table (``data/inflight_batcher_llm_1.1_parameters.json``) was read from TensorRT-LLM's
``triton_backend`` sources (files and commits in its ``sources``; docs/triton-backend.md "Parameters").
A key the backend does not read is silently ignored by it, and a value it cannot parse silently becomes
the default: both are errors here, with the nearest known key or the accepted values.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from functools import cache
from importlib import resources
from typing import Any

TABLE_FILE = "inflight_batcher_llm_1.1_parameters.json"
INT_RE = re.compile(r"[+-]?[0-9]+")
DIGITS_RE = re.compile(r"[0-9]+")
DEVICE_IDS_RE = re.compile(r"[0-9]+(,[0-9]+)*(;[0-9]+(,[0-9]+)*)*")
INT_LIST_RE = re.compile(r"[0-9]+(,[0-9]+)*")
CHOICES_RE = re.compile(r"[\s0-9,{}]*")
UINT64_MAX = 2**64 - 1
UINT32_MAX = 2**32 - 1
INT32 = (-(2**31), 2**31 - 1)
# the CPU reference model (backend python, in place of tensorrtllm) reads these of its own
REFERENCE_KEYS = {"toolchain_reference", "hf_model_dir", "tokens_per_block"}


@cache
def table() -> dict[str, Any]:
    """The reference table (shipped with the package)."""
    text = resources.files("toolchain.triton").joinpath("data", TABLE_FILE).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def keys(model: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = table()["models"][model]["parameters"]
    return out


def bool_values(kind: str) -> tuple[list[str], list[str]]:
    b = table()["boolean_values"][kind]
    return list(b["true"]), list(b["false"])


def parse_bool(kind: str, value: str) -> bool | None:
    """How the model reading ``value`` parses it (None: it cannot, and uses the default)."""
    true, false = bool_values(kind)
    v = value if kind == "cpp_bool" else value.lower()
    if v in true:
        return True
    if v in false:
        return False
    return None


def did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(known))}"


def value_problem(model: str, key: str, value: str, spec: dict[str, Any], models: set[str]) -> str | None:
    """Why ``value`` is not what the model reads for ``key`` (None when it is)."""
    t = spec["type"]
    if t in ("cpp_bool", "python_bool"):
        if parse_bool(t, value) is None:
            true, false = bool_values(t)
            default = spec.get("default")
            return f"{value!r} is not a boolean the model parses ({'/'.join(true + false)}); it falls back to {default}"
        return None
    if t == "bls_bool":
        if value.lower() not in (*bool_values(t)[0], *bool_values(t)[1]):
            return f"{value!r} reads as false (true is one of {'/'.join(bool_values(t)[0])}, case-insensitive)"
        return None
    if t == "enum":
        if value not in spec["values"]:
            shown = ", ".join(repr(v) for v in spec["values"])
            return f"{value!r} is not one of {shown}" + _fallback(spec)
        return None
    if t in ("int32", "uint32", "uint64"):
        return _int_problem(t, value, spec)
    if t == "float":
        return _float_problem(value, spec)
    if t == "digits":
        return None if DIGITS_RE.fullmatch(value) else f"{value!r} is not a whole number (the model uses None)"
    if t == "device_ids" and not DEVICE_IDS_RE.fullmatch(value):
        return f"{value!r} is not GPU ids like '0,1;2,3' (',' within an instance, ';' between instances)"
    if t == "int_list" and not INT_LIST_RE.fullmatch(value):
        return f"{value!r} is not a comma-separated list of whole numbers"
    if t == "choices" and (not CHOICES_RE.fullmatch(value) or value.count("{") != value.count("}")):
        return f"{value!r} is not a list of choices like '{{0, 0, 0}}, {{0, 1}}'"
    if t == "model_name" and value and not value.startswith("${") and value not in models:
        return f"names model {value!r}, which is not in the repository ({did_you_mean(value, sorted(models))})"
    return None


def _fallback(spec: dict[str, Any]) -> str:
    if spec.get("mandatory"):
        return " (the model fails to load)"
    d = spec.get("default")
    return f"; the backend silently uses {d}" if d is not None else "; the backend silently ignores it"


def _int_problem(t: str, value: str, spec: dict[str, Any]) -> str | None:
    if not INT_RE.fullmatch(value.strip()) or value != value.strip():
        lead = re.match(r"\s*[+-]?[0-9]+", value)
        if lead:
            return f"{value!r} is not a whole number; the backend reads only its leading {lead.group().strip()}"
        return f"{value!r} is not a whole number" + _fallback(spec)
    n = int(value)
    lo = spec.get("min", 0 if t != "int32" else INT32[0])
    hi = spec.get("max", {"int32": INT32[1], "uint32": UINT32_MAX, "uint64": UINT64_MAX}[t])
    if not lo <= n <= hi:
        return f"{n} is outside [{lo}, {hi}]"
    return None


def _float_problem(value: str, spec: dict[str, Any]) -> str | None:
    try:
        x = float(value)
    except ValueError:
        return f"{value!r} is not a number" + _fallback(spec)
    if not math.isfinite(x):
        return f"{value!r} is not a finite number"
    lo, hi = spec.get("min"), spec.get("max")
    low_ok = lo is None or (x > lo if spec.get("exclusive_min") else x >= lo)
    if not low_ok or (hi is not None and x > hi):
        left = "(" if spec.get("exclusive_min") else "["
        return f"{value} is outside {left}{lo}, {hi}]"
    return None
