"""Checks on a Hugging Face checkpoint's own files, shared by the stages that read them (planning, quantize).

Nothing here loads tensors: ``config.json`` is parsed and its sizes checked, and ``*.safetensors`` files are
read only as far as their header (8-byte little-endian length + JSON; format: huggingface/safetensors,
``docs/source/index.mdx``, "Format").
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from toolchain.errors import ModelConfigError

# Largest hidden/intermediate size accepted: far above any released model, far below what overflows.
_MAX_DIM = 10_000_000
INT32_MAX = 2**31 - 1


def read_config_json(cfg_path: Path) -> dict[str, Any]:
    """``config.json`` as a dict, or a one-line ModelConfigError (unreadable, binary, not JSON, not an object)."""
    try:
        cfg = json.loads(cfg_path.read_bytes())
    except OSError as e:
        raise ModelConfigError(f"{cfg_path}: cannot read ({e.strerror or e})") from e
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ModelConfigError(f"{cfg_path}: not valid JSON ({str(e)[:100]})") from e
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{cfg_path}: top level is not an object")
    return cfg


def _count(where: str, key: str, value: Any, *, limit: int = _MAX_DIM) -> int:
    """``value`` when it is an int in 1..limit, else a ModelConfigError naming ``key``."""
    # bool is an int subclass in Python; `hidden_size: true` is not a size
    if type(value) is not int or not 0 < value <= limit:
        raise ModelConfigError(f"{where}: {key} must be a positive integer up to {limit:,} (got {value!r:.60})")
    return value


def _attention_dims(cfg: dict[str, Any], where: str, hidden: int, heads: int) -> tuple[int, int]:
    """KV heads (default: one per attention head) and head dim (default: hidden / heads), checked."""
    kv = (
        _count(where, "num_key_value_heads", cfg["num_key_value_heads"])
        if cfg.get("num_key_value_heads") is not None
        else heads
    )
    if heads % kv:
        raise ModelConfigError(f"{where}: num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    if cfg.get("head_dim") is not None:
        return kv, _count(where, "head_dim", cfg["head_dim"], limit=65_536)
    if hidden % heads:
        raise ModelConfigError(
            f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads} and no head_dim is given"
        )
    return kv, hidden // heads


def _expert_dims(cfg: dict[str, Any], where: str) -> tuple[int, int]:
    """Experts and experts per token of a mixture-of-experts config (0, 0 for a dense one), checked."""
    experts = 0
    for key in ("num_local_experts", "num_experts"):
        if cfg.get(key):
            experts = _count(where, key, cfg[key], limit=100_000)
            break
    per_token = (
        _count(where, "num_experts_per_tok", cfg["num_experts_per_tok"])
        if experts and cfg.get("num_experts_per_tok")
        else 0
    )
    if per_token > experts:
        raise ModelConfigError(f"{where}: num_experts_per_tok {per_token} exceeds the {experts} experts")
    return experts, per_token


def _intermediate_size(cfg: dict[str, Any], where: str, hidden: int, experts: int) -> int:
    """The MLP's intermediate size: an MoE expert's when given, else the dense one, else 4 × hidden."""
    if experts and cfg.get("moe_intermediate_size") is not None:
        return _count(where, "moe_intermediate_size", cfg["moe_intermediate_size"])
    if cfg.get("intermediate_size") is not None:
        return _count(where, "intermediate_size", cfg["intermediate_size"])
    return 4 * hidden


def config_dims(cfg: dict[str, Any], where: str) -> dict[str, int]:
    """The decoder's sizes from a config, refused when they cannot describe a model (non-integers,
    booleans, values <= 0, heads that do not divide, hidden size not divisible by heads without head_dim)."""
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size") if k not in cfg]
    if missing:
        raise ModelConfigError(f"{where}: missing {', '.join(missing)}; is this a decoder-only LLM config?")
    layers = _count(where, "num_hidden_layers", cfg["num_hidden_layers"], limit=10_000)
    hidden = _count(where, "hidden_size", cfg["hidden_size"])
    heads = _count(where, "num_attention_heads", cfg["num_attention_heads"], limit=10_000)
    vocab = _count(where, "vocab_size", cfg["vocab_size"], limit=100_000_000)
    kv, head_dim = _attention_dims(cfg, where, hidden, heads)
    experts, per_token = _expert_dims(cfg, where)
    inter = _intermediate_size(cfg, where, hidden, experts)
    tie = cfg.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ModelConfigError(f"{where}: tie_word_embeddings must be true or false (got {tie!r:.60})")
    check_config_consistency(cfg, where, hidden, heads)
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "vocab": vocab,
        "kv_heads": kv,
        "head_dim": head_dim,
        "experts": experts,
        "experts_per_token": per_token,
        "intermediate": inter,
        "tie": int(tie),
    }


def check_config_consistency(cfg: dict[str, Any], where: str, hidden: int, heads: int) -> None:
    """Sizes that parse but cannot describe one decoder: a hidden size the attention heads do not divide (even
    with an explicit ``head_dim``: every family the planner knows splits the hidden size evenly over its heads),
    and a context length that is not a positive integer."""
    if hidden % heads:
        raise ModelConfigError(
            f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}",
            "fix config.json (it no longer matches the model), or re-download the checkpoint",
        )
    if cfg.get("max_position_embeddings") is not None:
        _count(where, "max_position_embeddings", cfg["max_position_embeddings"], limit=INT32_MAX)


# Bytes per element of the safetensors dtypes (huggingface/safetensors, ``safetensors/src/tensor.rs``, ``Dtype``);
# any other (sub-byte F4/F6 and newer types) gets only the extent check.
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "U64": 8,
}


def check_safetensors_data(f: Path, meta: dict[str, Any], header_len: int, size: int, hint: str) -> None:
    """The tensor data a safetensors header describes is the rest of the file, exactly: every tensor's
    ``data_offsets`` lie inside it and hold ``prod(shape)`` elements of its dtype, and the last one ends where the
    file ends. A file cut short by an interrupted download (its header intact) is refused here, before any tensor
    is read, instead of failing deep inside the safetensors loader."""
    data = size - 8 - header_len
    end = 0
    for k, v in meta.items():
        if k == "__metadata__":
            continue
        offsets = v.get("data_offsets")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or any(type(o) is not int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise ModelConfigError(f"{f}: tensor {k!r:.60} has no valid data_offsets in the safetensors header", hint)
        count = 1
        for d in v["shape"]:
            count *= d
        width = DTYPE_BYTES.get(str(v.get("dtype")))
        if width is not None and offsets[1] - offsets[0] != count * width:
            raise ModelConfigError(
                f"{f}: tensor {k!r:.60} spans {offsets[1] - offsets[0]} bytes, but {v.get('dtype')} "
                f"{v['shape']} needs {count * width}",
                hint,
            )
        end = max(end, offsets[1])
    if end > data:
        raise ModelConfigError(
            f"{f}: truncated: the header describes {end:,} bytes of tensor data, the file holds {max(data, 0):,}", hint
        )
    if end < data:
        raise ModelConfigError(f"{f}: {data - end:,} bytes after the last tensor (not a safetensors file)", hint)


def safetensors_param_count(model_dir: Path) -> int | None:
    """Parameter count from safetensors headers only (8-byte length + JSON), never the tensors."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        hint = "re-download the checkpoint; its safetensors files are damaged"
        try:
            with open(f, "rb") as fh:
                head = fh.read(8)
                if len(head) != 8:
                    raise ModelConfigError(f"{f}: truncated safetensors header ({len(head)} bytes)", hint)
                (n,) = struct.unpack("<Q", head)
                size = f.stat().st_size
                if n < 2 or n > 100_000_000 or 8 + n > size:
                    raise ModelConfigError(f"{f}: implausible safetensors header size {n} in a {size}-byte file", hint)
                meta = json.loads(fh.read(n))
        except OSError as e:
            raise ModelConfigError(f"{f}: cannot read ({e.strerror or e})", hint) from e
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelConfigError(f"{f}: the safetensors header is not JSON", hint) from exc
        if not isinstance(meta, dict):
            raise ModelConfigError(f"{f}: the safetensors header is not a JSON object", hint)
        for k, v in meta.items():
            if k == "__metadata__":
                continue
            shape = v.get("shape") if isinstance(v, dict) else None
            if not isinstance(shape, list) or any(type(d) is not int or d < 0 for d in shape):
                raise ModelConfigError(f"{f}: tensor {k!r:.60} has no valid shape in the safetensors header", hint)
            c = 1
            for d in shape:
                c *= d
            total += c
        check_safetensors_data(f, meta, n, size, hint)
    return total
