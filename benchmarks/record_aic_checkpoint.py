#!/usr/bin/env python
"""Record NVIDIA AIConfigurator 0.12.0's own CLI on the checkpoint that ships (no toolchain code runs here).

Each model directory holds a config.json with the ``quantization_config`` ModelOpt writes for the format (quant
method ``modelopt``, ``quant_algo`` FP8 / NVFP4, ``kv_cache_quant_algo`` FP8 where the KV cache is FP8), and no
``--*-quant-mode`` flag is given: AIConfigurator infers the GEMM, attention (fmha), KV-cache and MoE modes from
the config, as it does for a real checkpoint. The configurations are ones the older reference
(tests/reference/aiconfigurator_0.12.0.json) never used: other lengths, batches off the powers of two, context
tokens per step other than one ISL, NVFP4 on Blackwell, and `recommend` for a 70B fleet.

Usage: .venv/bin/python benchmarks/record_aic_checkpoint.py [PATH]
(default tests/reference/aiconfigurator_0.12.0_checkpoint.json)
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
AIC = REPO / ".venv-aic" / "bin" / "aiconfigurator"
OUT = REPO / "tests" / "reference" / "aiconfigurator_0.12.0_checkpoint.json"

# config.json of the two shapes as Meta publishes them (meta-llama/Llama-3.1-8B-Instruct,
# meta-llama/Llama-3.3-70B-Instruct on the Hugging Face Hub), less the rope scaling block AIConfigurator ignores
COMMON: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
SHAPES: dict[str, dict[str, int]] = {
    "llama-3.1-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "llama-3.3-70b": {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
}
ALGO = {"fp8": "FP8", "nvfp4": "NVFP4"}

# (model, weights, kv_cache, system, tp, batch, isl, osl, ctx_tokens or None)
ESTIMATES: list[tuple[str, str, str, str, int, int, int, int, int | None]] = [
    ("llama-3.1-8b", "fp8", "fp8", "b200_sxm", 1, 8, 4096, 512, None),  # the cell
    ("llama-3.1-8b", "fp8", "fp8", "b200_sxm", 1, 24, 4096, 512, 8192),
    ("llama-3.1-8b", "fp8", "auto", "h200_sxm", 1, 48, 2048, 256, None),  # FP8 weights, KV left to the model dtype
    ("llama-3.1-8b", "nvfp4", "fp8", "b200_sxm", 1, 12, 2048, 256, None),
    ("llama-3.3-70b", "fp8", "fp8", "h100_sxm", 2, 40, 4096, 512, None),
    ("llama-3.3-70b", "fp8", "fp8", "h200_sxm", 4, 96, 2048, 1024, 4096),
]
# (model, weights, system, rate req/s, isl, osl, ttft ms, tpot ms): the 70B fleet
RECOMMEND: list[tuple[str, str, str, float, int, int, float, float]] = [
    ("llama-3.3-70b", "fp8", "h100_sxm", 5.0, 4096, 512, 2000.0, 50.0),
]


def quant_config(weights: str, kv: str) -> dict[str, Any]:
    """The quantization_config ModelOpt's HF export writes for ``weights`` and an FP8 (or no) KV cache."""
    qc: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": ALGO[weights]}
    if kv == "fp8":
        qc["kv_cache_quant_algo"] = "FP8"
    return qc


def model_dir(tmp: Path, model: str, weights: str, kv: str) -> Path:
    d = tmp / f"{model}-{weights}-kv{kv}"
    d.mkdir(exist_ok=True)
    cfg = {**COMMON, **SHAPES[model], "quantization_config": quant_config(weights, kv)}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _field(text: str, label: str) -> float | None:
    m = re.search(rf"^\s*{re.escape(label)}:\s*([\d,.]+)", text, re.M)
    return float(m.group(1).replace(",", "")) if m else None


def _modes(text: str) -> dict[str, str]:
    pattern = r"Resolved quant modes for \S+: gemm=\S+?\.(\w+) moe=\S+?\.(\w+) kvcache=\S+?\.(\w+) fmha=\S+?\.(\w+)"
    m = re.search(pattern, text)
    return dict(zip(("gemm", "moe", "kvcache", "fmha"), m.groups(), strict=True)) if m else {}


def _command(cmd: list[str], tmp: Path) -> str:
    return " ".join(["aiconfigurator", *cmd[1:]]).replace(str(tmp) + "/", "")


def estimate(tmp: Path, row: tuple[str, str, str, str, int, int, int, int, int | None]) -> dict[str, Any]:
    model, weights, kv, system, tp, batch, isl, osl, ctx = row
    cmd = [str(AIC), "cli", "estimate", "--model-path", str(model_dir(tmp, model, weights, kv)), "--system", system]
    cmd += ["--backend", "trtllm", "--estimate-mode", "agg", "--batch-size", str(batch), "--tp", str(tp)]
    cmd += ["--isl", str(isl), "--osl", str(osl)] + (["--ctx-tokens", str(ctx)] if ctx else [])
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=900)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise SystemExit(f"{_command(cmd, tmp)}: exit {r.returncode}\n{out[-2000:]}")
    db = re.search(r"Backend:\s*trtllm \(([^)]+)\)", out)
    return {
        "model": model,
        "weights": weights,
        "kv_cache": kv,
        "system": system,
        "tp": tp,
        "batch": batch,
        "isl": isl,
        "osl": osl,
        "ctx_tokens": int(_field(out, "Context Tokens") or 0),
        "command": _command(cmd, tmp),
        "modes": _modes(out),
        "ttft_ms": _field(out, "TTFT"),
        "tpot_ms": _field(out, "TPOT"),
        "tok_s_per_gpu": _field(out, "tokens/s/gpu"),
        "database": f"trtllm {db.group(1)}" if db else None,
    }


def recommend(tmp: Path, row: tuple[str, str, str, float, int, int, float, float]) -> dict[str, Any]:
    model, weights, system, rate, isl, osl, ttft, tpot = row
    cmd = [str(AIC), "cli", "recommend", "--model-path", str(model_dir(tmp, model, weights, "fp8")), "--system"]
    cmd += [system, "--backend", "trtllm", "--target-request-rate", f"{rate:g}", "--isl", str(isl), "--osl", str(osl)]
    cmd += ["--ttft", f"{ttft:g}", "--tpot", f"{tpot:g}"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=1800)
    out = r.stdout + r.stderr
    agg = re.search(r"agg GPUs needed:\s*(\d+)", out)
    if r.returncode != 0 or agg is None:
        raise SystemExit(f"{_command(cmd, tmp)}: exit {r.returncode}\n{out[-2000:]}")
    return {
        "model": model,
        "weights": weights,
        "system": system,
        "rate": rate,
        "isl": isl,
        "osl": osl,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "command": _command(cmd, tmp),
        "agg_gpus": int(agg.group(1)),
    }


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    formats = sorted({(e[1], e[2]) for e in ESTIMATES})
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        rows = []
        for e in ESTIMATES:
            print(f"estimate {e}", file=sys.stderr, flush=True)
            rows.append(estimate(tmp, e))
        recs = []
        for r in RECOMMEND:
            print(f"recommend {r}", file=sys.stderr, flush=True)
            recs.append(recommend(tmp, r))
    doc = {
        "source": "NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator==0.12.0, aiconfigurator-core==0.12.0), its own "
        "CLI (`aiconfigurator cli estimate` / `recommend`, the commands below, quant modes inferred by it from "
        "each model directory's config.json), recorded by benchmarks/record_aic_checkpoint.py; no toolchain code "
        "computes these figures",
        "recorded": datetime.date.today().isoformat(),
        "model_configs": {m: {**COMMON, **s} for m, s in SHAPES.items()},
        "quantization_configs": {f"{w}-kv{kv}": quant_config(w, kv) for w, kv in formats},
        "estimates": rows,
        "recommend": recs,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}: {len(rows)} estimates, {len(recs)} recommendations", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
