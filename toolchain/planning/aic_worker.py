"""Run NVIDIA AIConfigurator estimates in its own environment (``.venv-aic``), one JSON line per query.

This file is executed by the interpreter of the AIConfigurator venv (``python aic_worker.py``), not imported
by the toolchain: it uses only the standard library and ``aiconfigurator``. Protocol on stdin/stdout:

- on start it prints ``{"ready": true, "aiconfigurator": VERSION}`` (or ``{"error": ...}`` and exits 3);
- each input line is a query ``{"model_path", "system", "batch", "tp", "pp", "isl", "osl", "gemm", "kv"}`` and
  optional ``"mode"``: ``agg`` (in-flight batching, the default), ``static_ctx`` (prefill only) or ``static_gen``
  (decode only), AIConfigurator's estimate modes, and ``"ctx_tokens"`` (context tokens per step, agg). ``gemm``
  and ``kv`` null: AIConfigurator infers the quant modes from the model's config.json, as its CLI does;
- each output line answers it: ``{"ttft_ms", "tpot_ms", "tok_s", "tok_s_per_gpu", "memory_gb",
  "backend_version", "warning", "modes", "ctx_tokens"}`` (``modes``: the gemm, fmha, kvcache and moe quant modes
  it ran) or ``{"error": message}`` when the database cannot answer that query.

AIConfigurator's own logging goes to stderr, which the caller discards; stdout carries only the protocol.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from typing import Any

_VERSIONS: dict[str, str] = {}  # system -> its latest trtllm database version, resolved once


def _database_version(system: str) -> str:
    """The system's newest trtllm database. Resolving it reads every collection's YAML (about 1.5 s), so it is
    done once per system and then given to each estimate, which then takes milliseconds."""
    if system not in _VERSIONS:
        from aiconfigurator_core.sdk.perf_database import get_latest_database_version

        version = get_latest_database_version(system=system, backend="trtllm")
        if version is None:
            raise LookupError(f"no trtllm database for system {system}")
        _VERSIONS[system] = version
    return _VERSIONS[system]


def _answer(estimate: Any, query: dict[str, Any]) -> dict[str, Any]:
    """The query's figures from AIConfigurator's ``cli_estimate``, on stdout-free terms."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        version = _database_version(query["system"])
        r = estimate(
            query["model_path"],
            query["system"],
            mode=query.get("mode", "agg"),
            backend_name="trtllm",
            backend_version=version,
            batch_size=int(query["batch"]),
            isl=int(query["isl"]),
            osl=int(query["osl"]),
            tp_size=int(query["tp"]),
            pp_size=int(query["pp"]),
            gemm_quant_mode=query.get("gemm"),
            kvcache_quant_mode=query.get("kv"),
            ctx_tokens=query.get("ctx_tokens"),
        )
    raw = r.raw if isinstance(r.raw, dict) else {}
    return {
        "ttft_ms": float(r.ttft),
        "tpot_ms": float(r.tpot),
        "tok_s": float(r.tokens_per_second),
        "tok_s_per_gpu": float(r.tokens_per_second_per_gpu),
        "memory_gb": float(r.memory),
        "backend_version": str(r.backend_version),
        "warning": r.kv_cache_warning,
        "modes": {k: str(raw[k]) for k in ("gemm", "fmha", "kvcache", "moe") if raw.get(k) is not None},
        "ctx_tokens": getattr(r, "ctx_tokens", None),
    }


def main() -> int:
    logging.disable(logging.WARNING)
    try:
        import importlib.metadata as md

        with contextlib.redirect_stdout(sys.stderr):
            from aiconfigurator.cli.api import cli_estimate
        version = md.version("aiconfigurator")
    except Exception as e:  # the venv is broken or not AIConfigurator's: say so on the protocol
        print(json.dumps({"error": f"aiconfigurator does not import: {type(e).__name__}: {e}"}), flush=True)
        return 3
    print(json.dumps({"ready": True, "aiconfigurator": version}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            query = json.loads(line)
            reply = _answer(cli_estimate, query)
        except Exception as e:  # one query the database cannot answer must not end the others
            reply = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
