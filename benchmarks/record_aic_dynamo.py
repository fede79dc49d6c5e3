"""Record NVIDIA AIConfigurator's own CLI figures for the shipped Dynamo spec's pools (the reference that
tests/dynamo/test_silicon_plan.py holds `dynamo plan --estimator aic` against).

The shape is engine_specs/llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml's cell h100-sxm-b64-s8192-i4096-tp2: Llama 3.3
70B, FP8 weights and KV, H100-SXM TP2, the traffic's mean prompt 2048 and mean output 300 tokens. Per AIConfigurator's
estimate modes: ``static_ctx`` (prefill only) at batch 1, ``static_gen`` (decode only) and ``agg`` (in-flight
batching) at batches 1, 2, 4, ... 64. Only AIConfigurator's CLI runs here; no toolchain code computes a figure.

Usage: .venv/bin/python benchmarks/record_aic_dynamo.py tests/reference/aiconfigurator_dynamo_0.12.0.json
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

from benchmarks.aic_estimate_bench import AIC, COMMON, MODELS

MODEL, SYSTEM, TP, ISL, OSL = "llama-3.3-70b", "h100_sxm", 2, 2048, 300
BATCHES = [1, 2, 4, 8, 16, 32, 64]


def _field(text: str, label: str) -> float | None:
    m = re.search(rf"^\s*{re.escape(label)}:\s*([\d,.]+)", text, re.M)
    return float(m.group(1).replace(",", "")) if m else None


def estimate(tmp: Path, mode: str, batch: int) -> dict[str, Any]:
    cmd = [str(AIC), "cli", "estimate", "--model-path", MODEL, "--system", SYSTEM, "--backend", "trtllm"]
    cmd += ["--estimate-mode", mode, "--batch-size", str(batch), "--tp", str(TP), "--isl", str(ISL)]
    cmd += ["--osl", str(OSL)]  # the modes: AIConfigurator's own, from the checkpoint's quantization_config
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=600)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out[-500:]}")
    m = re.search(r"Backend:\s*trtllm \(([^)]+)\)", out)
    return {
        "mode": mode,
        "batch": batch,
        "command": " ".join(["aiconfigurator", *cmd[1:]]),
        "ttft_ms": _field(out, "TTFT"),
        "tpot_ms": _field(out, "TPOT"),
        "tok_s": _field(out, "tokens/s"),
        "database": f"trtllm {m.group(1)}" if m else None,
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        (tmp / MODEL).mkdir()
        # the FP8 checkpoint ModelOpt's HF export writes: AIConfigurator infers FP8 GEMMs, attention and KV from it
        qc = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
        (tmp / MODEL / "config.json").write_text(json.dumps({**COMMON, **MODELS[MODEL], "quantization_config": qc}))
        rows = [estimate(tmp, "static_ctx", 1)]
        for mode in ("static_gen", "agg"):
            for b in BATCHES:
                rows.append(estimate(tmp, mode, b))
                print(f"{mode} batch {b}: {rows[-1]['tpot_ms']} ms", file=sys.stderr)
    doc = {
        "source": "NVIDIA AIConfigurator 0.12.0's own CLI (`aiconfigurator cli estimate`, the commands below), "
        "recorded by benchmarks/record_aic_dynamo.py; no toolchain code computes these figures",
        "recorded": datetime.date.today().isoformat(),
        "model_config": {**COMMON, **MODELS[MODEL]},
        "system": SYSTEM,
        "tp": TP,
        "isl": ISL,
        "osl": OSL,
        "estimates": rows,
    }
    Path(sys.argv[1]).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
