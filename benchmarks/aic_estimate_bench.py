#!/usr/bin/env python
"""The toolchain's silicon estimate against NVIDIA AIConfigurator's own CLI, and against the roofline floor.

For each configuration (Llama-3.1-8B and Llama-3.3-70B shapes; H100-SXM, H200-SXM, B200; FP8 and INT4-AWQ weights
with FP8 KV; TP 1/2/4; batch 1/64/256; ISL 1024 / OSL 256) it prints:

- `aiconfigurator cli estimate` (AIConfigurator 0.12.0, the `.venv-aic` of scripts/setup-aic.sh) against the
  toolchain's estimate (`toolchain plan --estimator aic`, which runs the same database through its worker): they must
  agree within 1 %;
- the toolchain's roofline floor beside it, and estimate ÷ floor (the floor is a lower bound: never above);
- `aiconfigurator cli recommend` for the shipped 8B spec's traffic (50 req/s, TTFT 500 ms, TPOT 30 ms) against
  the fleet of `toolchain plan --search` on that GPU at full load (within one GPU or 15 %).

The AIConfigurator side is read from tests/reference/aiconfigurator_0.12.0.json (recorded by this script with
``--record``, which runs only AIConfigurator's CLI: no toolchain code); ``--live`` runs the CLI again instead.
Where the database has no data (INT4-AWQ on these GPUs in trtllm 1.3.0rc20) the row says so and the toolchain
falls back to the floor, with a warning.

Usage: .venv/bin/python benchmarks/aic_estimate_bench.py [--quick] [--live] [--record PATH]
"""

from __future__ import annotations

import argparse
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
REFERENCE = REPO / "tests" / "reference" / "aiconfigurator_0.12.0.json"
ISL, OSL = 1024, 256

# config.json of the two shapes, as Meta publishes them on the Hugging Face Hub (meta-llama/Llama-3.1-8B-Instruct,
# meta-llama/Llama-3.3-70B-Instruct), less the rope scaling block AIConfigurator does not read
MODELS: dict[str, dict[str, Any]] = {
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
COMMON = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "b200_sxm": "B200"}
GEMM = {"fp8": "fp8", "int4_awq": "int4_wo"}
# the weight formats whose ModelOpt quant_algo AIConfigurator infers its modes from (FP8: gemm fp8_static, fmha fp8,
# KV fp8); INT4-AWQ's W4A16_AWQ it refuses, so that GEMM mode is given on the command line
READS = {"fp8"}

# (model, system, weights, tp, batch)
CONFIGS: list[tuple[str, str, str, int, int]] = [
    *[("llama-3.1-8b", s, "fp8", 1, b) for s in ("h100_sxm", "h200_sxm", "b200_sxm") for b in (1, 64, 256)],
    ("llama-3.3-70b", "h100_sxm", "fp8", 2, 1),
    ("llama-3.3-70b", "h100_sxm", "fp8", 2, 64),
    ("llama-3.3-70b", "h100_sxm", "fp8", 4, 256),
    ("llama-3.3-70b", "h200_sxm", "fp8", 2, 1),
    ("llama-3.3-70b", "h200_sxm", "fp8", 2, 64),
    ("llama-3.3-70b", "h200_sxm", "fp8", 1, 64),
    ("llama-3.3-70b", "b200_sxm", "fp8", 2, 64),
    ("llama-3.3-70b", "b200_sxm", "fp8", 4, 256),
    ("llama-3.1-8b", "h100_sxm", "int4_awq", 1, 64),
    ("llama-3.1-8b", "h200_sxm", "int4_awq", 1, 64),
    ("llama-3.3-70b", "b200_sxm", "int4_awq", 2, 64),
]
QUICK = [("llama-3.1-8b", "h100_sxm", "fp8", 1, 64)]  # one database, as the quick recommendation (H100)
# the shipped engine_specs/llama-3.1-8b-fp8.yaml traffic and SLOs
RECOMMEND: dict[str, Any] = {"rate": 50.0, "ttft": 500.0, "tpot": 30.0, "systems": ["h100_sxm", "h200_sxm"]}


def _model_dir(tmp: Path, model: str, weights: str | None = None) -> Path:
    d = tmp / (model + (f"-{weights}" if weights else ""))
    d.mkdir(exist_ok=True)
    cfg = {**COMMON, **MODELS[model]}
    if weights:  # AIConfigurator reads the quantization from config.json (the form ModelOpt's HF export writes)
        cfg["quantization_config"] = {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}
        if weights in READS:
            cfg["quantization_config"]["quant_algo"] = weights.upper()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _field(text: str, label: str) -> float | None:
    m = re.search(rf"^\s*{re.escape(label)}:\s*([\d,.]+)", text, re.M)
    return float(m.group(1).replace(",", "")) if m else None


def aic_estimate(tmp: Path, model: str, system: str, weights: str, tp: int, batch: int) -> dict[str, Any]:
    """`aiconfigurator cli estimate` for one configuration, parsed from its report."""
    cmd = [str(AIC), "cli", "estimate", "--model-path", str(_model_dir(tmp, model, weights)), "--system", system]
    cmd += ["--backend", "trtllm", "--estimate-mode", "agg", "--batch-size", str(batch), "--tp", str(tp)]
    cmd += ["--isl", str(ISL), "--osl", str(OSL)]
    if weights not in READS:
        cmd += ["--gemm-quant-mode", GEMM[weights]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=600)
    out = r.stdout + r.stderr
    row: dict[str, Any] = {"model": model, "system": system, "weights": weights, "tp": tp, "batch": batch}
    row["command"] = " ".join(["aiconfigurator", *cmd[1:]]).replace(str(tmp) + "/", "")
    ttft, tpot = _field(out, "TTFT"), _field(out, "TPOT")
    if r.returncode != 0 or ttft is None or tpot is None:
        err = [ln for ln in out.splitlines() if "Error" in ln or "error" in ln]
        row["error"] = re.sub(r" at /\S+", "", err[-1].strip() if err else f"exit {r.returncode}")[:300]
        return row
    m = re.search(r"Backend:\s*trtllm \(([^)]+)\)", out)
    row.update(
        ttft_ms=ttft,
        tpot_ms=tpot,
        tok_s_per_gpu=_field(out, "tokens/s/gpu"),
        memory_gb=_field(out, "Memory (GPU)"),
        database=f"trtllm {m.group(1)}" if m else None,
    )
    return row


def aic_recommend(tmp: Path, system: str) -> dict[str, Any]:
    """`aiconfigurator cli recommend` for the 8B spec's traffic on one system: the GPUs it says are needed."""
    cmd = [str(AIC), "cli", "recommend", "--model-path", str(_model_dir(tmp, "llama-3.1-8b", "fp8")), "--system"]
    cmd += [system, "--backend", "trtllm", "--target-request-rate", str(RECOMMEND["rate"]), "--isl", str(ISL)]
    cmd += ["--osl", str(OSL), "--ttft", str(RECOMMEND["ttft"]), "--tpot", str(RECOMMEND["tpot"])]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=900)
    out = r.stdout + r.stderr
    agg = re.search(r"agg GPUs needed:\s*(\d+)", out)
    dis = re.search(r"disagg GPUs needed:\s*(\d+)", out)
    return {
        "system": system,
        "command": " ".join(["aiconfigurator", *cmd[1:]]).replace(str(tmp) + "/", ""),
        "agg_gpus": int(agg.group(1)) if agg else None,
        "disagg_gpus": int(dis.group(1)) if dis else None,
    }


def record(path: Path) -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        rows = []
        for c in CONFIGS:
            print(f"aiconfigurator cli estimate {c}", file=sys.stderr, flush=True)
            rows.append(aic_estimate(tmp, *c))
        recs = []
        for s in RECOMMEND["systems"]:
            print(f"aiconfigurator cli recommend {s}", file=sys.stderr, flush=True)
            recs.append(aic_recommend(tmp, s))
    doc = {
        "source": "NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator==0.12.0, aiconfigurator-core==0.12.0), "
        "its own CLI (`aiconfigurator cli estimate` / `recommend`, the commands below), recorded by "
        "benchmarks/aic_estimate_bench.py --record; no toolchain code computes these figures",
        "recorded": datetime.date.today().isoformat(),
        "isl": ISL,
        "osl": OSL,
        "kv_cache": "fp8",
        "model_configs": {m: {**COMMON, **cfg} for m, cfg in MODELS.items()},
        "estimates": rows,
        "recommend": {**{k: v for k, v in RECOMMEND.items() if k != "systems"}, "results": recs},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}: {len(rows)} estimates, {len(recs)} recommendations")


def _spec(tmp: Path, model: str, gpu: str, weights: str, tp: int, batch: int, slo: bool = False) -> Path:
    import yaml

    d: dict[str, Any] = {
        "name": f"bench-{model}",
        "model": {"source": f"hf://meta-llama/{model}@main", "dtype": "bfloat16", "architecture": model},
        # INT4-AWQ with an FP8 KV cache turns paged context FMHA off (a rule of the toolchain): BF16 KV there
        "quantization": {"weights": weights, "kv_cache": "auto" if weights == "int4_awq" else "fp8"},
        "runtime": "tensorrt",
        "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
        "parallelism": {"tp": tp},
        "matrix": {"gpu": [gpu], "max_batch_size": [batch], "max_seq_len": [4096], "max_input_len": [2048]},
        "build": {"max_num_tokens": 8192},
        "traffic": {
            "peak_rps": RECOMMEND["rate"],
            "input_tokens": {"dist": "fixed", "mean": ISL},
            "output_tokens": {"dist": "fixed", "mean": OSL},
        },
    }
    if slo:
        d["slo"] = {"ttft_ms": {"p99": RECOMMEND["ttft"]}, "tpot_ms": {"p99": RECOMMEND["tpot"]}}
    p = tmp / f"{model}-{gpu}-{weights}-tp{tp}-b{batch}-{int(slo)}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def toolchain_estimate(tmp: Path, model: str, system: str, weights: str, tp: int, batch: int) -> dict[str, Any]:
    """The toolchain's plan of that configuration: its estimate at ``batch`` and its floor."""
    from toolchain.errors import CompatibilityError
    from toolchain.planning.plan import floor_tpot_ms_at
    from toolchain.planning.spec_plan import plan_spec
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    spec = load_spec(_spec(tmp, model, GPUS[system], weights, tp, batch))
    try:
        plan = plan_spec(spec, estimator="auto").plans[0]
    except CompatibilityError as e:  # the toolchain's own rules refuse the cell before any estimate
        return {"floor_tpot_ms": None, "floor_prefill_ms": None, "warning": f"refused: {e}"}
    row: dict[str, Any] = {"floor_prefill_ms": plan.prefill_ms_avg_input}
    row["floor_tpot_ms"] = floor_tpot_ms_at(plan, expand(spec)[0], arch_for_spec(spec), batch)
    point = next((c for c in (plan.estimate or {}).get("curve", []) if c["batch"] == batch), None)
    if point is None:
        row["warning"] = next((w for w in plan.warnings if "no silicon estimate" in w), "no estimate at this batch")
        return row
    row.update(ttft_ms=point["ttft_ms"], tpot_ms=point["tpot_ms"], tok_s_per_gpu=point["tok_s_per_gpu"])
    return row


def toolchain_fleet(tmp: Path, system: str) -> dict[str, Any]:
    """`plan --search` on one GPU for the 8B spec's traffic: the best candidate's fleet at full load."""
    from toolchain.planning.search import search_spec
    from toolchain.specs.loader import load_spec

    spec = load_spec(REPO / "engine_specs" / "llama-3.1-8b-fp8.yaml")
    res = search_spec(spec, gpus=[GPUS[system]], formats=["fp8"], estimator="aic")
    best = res.best
    return {"config": best.config if best else None, "gpus_at_full_load": best.gpus_at_full_load if best else None,
            "gpus": best.gpus if best else None, "batch": best.max_batch_size if best else None}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 8B H100 batch-64 row and its recommendation only")
    ap.add_argument("--live", action="store_true", help="run AIConfigurator's CLI now instead of the recording")
    ap.add_argument("--record", type=Path, help="record AIConfigurator's CLI figures to this JSON file and stop")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    a = ap.parse_args()
    if a.record:
        record(a.record)
        return 0
    ref = json.loads(REFERENCE.read_text())
    configs = QUICK if a.quick else CONFIGS
    systems = RECOMMEND["systems"][:1] if a.quick else RECOMMEND["systems"]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if a.live:
            aic_rows = [aic_estimate(tmp, *c) for c in configs]
            recs = [aic_recommend(tmp, s) for s in systems]
        else:
            by_key = {(r["model"], r["system"], r["weights"], r["tp"], r["batch"]): r for r in ref["estimates"]}
            aic_rows = [by_key[c] for c in configs]
            recs = [r for r in ref["recommend"]["results"] if r["system"] in systems]
        ours = [toolchain_estimate(tmp, *c) for c in configs]
        fleets = [toolchain_fleet(tmp, s) for s in systems]
    source = "live" if a.live else f"recorded {ref['recorded']}"
    print(f"AIConfigurator CLI ({source}) vs toolchain estimate vs roofline floor, ISL {ISL} / OSL {OSL}, FP8 KV")
    print("| config | AIC TPOT ms | toolchain TPOT ms | Δ | AIC TTFT ms | toolchain TTFT ms | floor TPOT ms | "
          "estimate ÷ floor |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    worst, agree, floor_ok = 0.0, True, True
    for c, aic, mine in zip(configs, aic_rows, ours, strict=True):
        name = f"{c[0]} {GPUS[c[1]]} {c[2]} TP{c[3]} b={c[4]}"
        if "error" in aic or "tpot_ms" not in mine:
            why = aic.get("error") or mine.get("warning")
            floor = f"{mine['floor_tpot_ms']:.2f}" if mine["floor_tpot_ms"] else "-"
            print(f"| {name} | no data | floor only | | | | {floor} | ({str(why)[:70]}) |")
            agree &= ("error" in aic) == ("tpot_ms" not in mine)
            continue
        d = max(abs(mine["tpot_ms"] / aic["tpot_ms"] - 1), abs(mine["ttft_ms"] / aic["ttft_ms"] - 1))
        worst = max(worst, d)
        agree &= d <= 0.01
        floor_ok &= mine["floor_tpot_ms"] <= mine["tpot_ms"] and mine["floor_prefill_ms"] <= mine["ttft_ms"]
        x = mine["tpot_ms"] / mine["floor_tpot_ms"]
        print(f"| {name} | {aic['tpot_ms']:.2f} | {mine['tpot_ms']:.2f} | {d:.2%} | {aic['ttft_ms']:.1f} | "
              f"{mine['ttft_ms']:.1f} | {mine['floor_tpot_ms']:.2f} | {x:.1f}× |")  # fmt: skip
    print()
    print("| GPU | AIC recommend (agg) GPUs | toolchain --search GPUs at full load (with headroom) | config |")
    print("|---|---|---|---|")
    fleet_ok = True
    for rec, f in zip(recs, fleets, strict=True):
        theirs, mine_g = rec["agg_gpus"], f["gpus_at_full_load"]
        ok = (
            theirs is not None
            and mine_g is not None
            and (abs(mine_g - theirs) <= 1 or abs(mine_g / theirs - 1) <= 0.15)
        )
        fleet_ok &= ok
        print(f"| {GPUS[rec['system']]} | {theirs} | {mine_g} ({f['gpus']}) | {f['config']} b={f['batch']} |")
    print()
    print(f"estimate vs aiconfigurator cli estimate: worst {worst:.3%}; agree within 1 %: {'yes' if agree else 'NO'}")
    print(f"floor never above the estimate: {'yes' if floor_ok else 'NO'}")
    print(f"fleet within one GPU or 15 % of aiconfigurator cli recommend: {'yes' if fleet_ok else 'NO'}")
    if a.json:
        a.json.write_text(
            json.dumps({"aic": aic_rows, "toolchain": ours, "recommend": recs, "fleets": fleets}, indent=1)
        )
    return 0 if agree and floor_ok and fleet_ok else 1


if __name__ == "__main__":
    sys.exit(main())
