"""Trace replay (``toolchain bench --trace FILE``): the Mooncake / AIPerf ``mooncake_trace`` JSONL form.

One request per line: ``timestamp`` (milliseconds after the trace's start), ``input_length`` and
``output_length`` (tokens), and ``hash_ids`` (one id per block of ``block_tokens`` prompt tokens, 512 in
the Mooncake traces; two requests that share a leading run of ids share that prompt prefix). A line may
carry ``text_input`` instead of lengths and ids: that text is sent as it is. Requests go out at their
timestamps divided by the speed (1 = the trace's own pace, 2 = twice as fast).

Each hash id becomes one block of text with exactly ``block_tokens`` tokens, built once and reused for
every request that names it, so the server sees the same shared prefixes the trace recorded; a request's
last block is the first tokens of its id's block, and tokens beyond the listed blocks are unique text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from toolchain.bench.workload import PromptMaker, Request
from toolchain.errors import UserInputError

BLOCK_TOKENS = 512  # tokens per hash id in the published Mooncake traces (and AIPerf's default)
MAX_TOKENS = 1 << 20  # a length above this is a damaged trace, not a request
HINT = (
    'each line is a JSON object: {"timestamp": MS, "input_length": N, "output_length": M, "hash_ids": [...]} '
    '(or "text_input" instead of input_length/hash_ids)'
)


def _count(obj: dict[str, Any], key: str, where: str, *, required: bool) -> int | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise UserInputError(f"{where}: no {key!r}", HINT)
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
        raise UserInputError(f"{where}: {key} must be a whole number of tokens from 1 to {MAX_TOKENS}, not {v!r}", HINT)
    return v


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The trace's entries, validated (each problem a one-line UserInputError naming the line), by timestamp."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserInputError(f"cannot read the trace {path}: {e.strerror or e}", "pass a JSONL trace file") from e
    except UnicodeDecodeError as e:
        raise UserInputError(f"{path} is not UTF-8 text, so not a JSONL trace", HINT) from e
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise UserInputError(f"{where}: not JSON", HINT) from e
        if not isinstance(obj, dict):
            raise UserInputError(f"{where}: expected a JSON object", HINT)
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
            raise UserInputError(f"{where}: timestamp must be milliseconds >= 0, not {ts!r}", HINT)
        text_input = obj.get("text_input")
        if text_input is not None and not isinstance(text_input, str):
            raise UserInputError(f"{where}: text_input must be a string", HINT)
        ids = obj.get("hash_ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise UserInputError(f"{where}: hash_ids must be a list of whole numbers", HINT)
        entries.append(
            {
                "timestamp_ms": float(ts),
                "input_length": _count(obj, "input_length", where, required=text_input is None),
                "output_length": _count(obj, "output_length", where, required=True),
                "hash_ids": ids,
                "text_input": text_input,
            }
        )
    if not entries:
        raise UserInputError(f"the trace {path} holds no requests", HINT)
    return sorted(entries, key=lambda e: e["timestamp_ms"])


class _Blocks:
    """One text of ``size`` tokens per hash id, made once; prefixes of it for a request's partial last block."""

    def __init__(self, pm: PromptMaker, size: int) -> None:
        self.pm, self.size = pm, size
        self.ids: dict[int, list[int]] = {}

    def text(self, hid: int, n: int) -> str:
        if hid not in self.ids:
            self.ids[hid] = self.pm.tok.encode(self.pm.make(self.size), add_special_tokens=False)
        return str(self.pm.tok.decode(self.ids[hid][:n]))


def trace_requests(tokenizer: Any, entries: list[dict[str, Any]], seed: int, block_tokens: int) -> list[Request]:
    """A Request per entry, its prompt built from its hash-id blocks, its arrival time in seconds."""
    if block_tokens < 1:
        raise UserInputError(f"--trace-block-tokens must be at least 1, not {block_tokens}")
    pm = PromptMaker(tokenizer, seed)
    blocks = _Blocks(pm, block_tokens)
    reqs = []
    seen: set[int] = set()
    for e in entries:
        at = e["timestamp_ms"] / 1000.0
        if e["text_input"] is not None:
            reqs.append(Request(e["text_input"], pm.count(e["text_input"]), e["output_length"], at=at))
            continue
        left, parts = e["input_length"], []
        for hid in e["hash_ids"]:
            if left <= 0:
                break
            take = min(left, block_tokens)
            parts.append(blocks.text(hid, take))
            left -= take
        if left > 0:
            parts.append(pm.make(left))
        text = "".join(parts)
        ids = e["hash_ids"]
        shared = ids[0] in seen if ids else False  # its leading block was sent before: a prefix-cache hit
        seen.update(ids)
        reqs.append(Request(text, pm.count(text), e["output_length"], shared_prefix=shared, at=at))
    return reqs
