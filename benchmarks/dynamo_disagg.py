#!/usr/bin/env python
"""Aggregated against disaggregated serving on NVIDIA Dynamo, with the same number of workers, on one mixed
workload: a minority of long prompts among short chats.

Both topologies run here with `toolchain dynamo up`: the Dynamo frontend and router, and the Dynamo mocker
(stand-in for dynamo.trtllm) timed by the planner's estimates for Llama-3.3-70B FP8 on H100 TP2
(engine_specs/llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml), every delay divided by the same --speedup. Aggregated: two
workers, each doing prefill and decode (round-robin). Disaggregated: one prefill worker and one decode worker.
`toolchain bench --protocol openai-chat` sends the same prompts (seeded) to both; `toolchain diagnose` reads the
aggregated run. The output is a Markdown table (TTFT and TPOT P50/P99 and P99/P50) and a JSON file.

Usage: .venv/bin/python benchmarks/dynamo_disagg.py [--requests 60] [--concurrency 8] [--speedup 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "engine_specs" / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
MODEL = "llama-3.3-70b-instruct-fp8-dynamo-disagg"
WORDS = (
    "the quick brown fox jumps over a lazy dog while prefill and decode share one batch".split()  # noqa: SIM905
)


def specs(tmp: Path) -> dict[str, Path]:
    base = yaml.safe_load(SPEC.read_text())
    out = {}
    for mode, block in (
        ("aggregated", {"mode": "aggregated", "router": "round-robin", "workers": {"tp": 2, "replicas": 2}}),
        (
            "disaggregated",
            {"mode": "disaggregated", "router": "round-robin", "link": {"kind": "infiniband-ndr"},
             "prefill": {"tp": 2, "replicas": 1}, "decode": {"tp": 2, "replicas": 1}},
        ),
    ):  # fmt: skip
        d = dict(base, dynamo=block)
        p = tmp / f"{mode}.yaml"
        p.write_text(yaml.safe_dump(d, sort_keys=False))
        out[mode] = p
    return out


def workload(path: Path, n: int, long_fraction: float, seed: int) -> Path:
    """Short chats (about 100 words) with a minority of long documents (about 2,500 words)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            words = 2500 if rng.random() < long_fraction else 100
            f.write(json.dumps({"prompt": " ".join(rng.choice(WORDS) for _ in range(words))}) + "\n")
    return path


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, text=True, capture_output=True, env=env, **kw)


def bench_mode(mode: str, spec: Path, data: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workdir = tmp / f"run-{mode}"
    with open(tmp / f"up-{mode}.log", "w") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "toolchain.cli.main", "dynamo", "up", str(spec), "--json", "--workdir",
             str(workdir), "--speedup", str(args.speedup)],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        assert up.stdout is not None
        line = up.stdout.readline()
        if not line:
            raise SystemExit(f"dynamo up ({mode}) failed: {(tmp / f'up-{mode}.log').read_text()[-2000:]}")
        info = json.loads(line)
        result = tmp / f"{mode}.json"
        r = run(
            [sys.executable, "-m", "toolchain.cli.main", "bench", "--url", info["url"], "--protocol", "openai-chat",
             "--model", MODEL, "--tokenizer", str(workdir / "model"), "--dataset", str(data),
             "--output-tokens", str(args.output_tokens), "--concurrency", str(args.concurrency),
             "--requests", str(args.requests), "--warmup", "2", "--seed", "7",
             "--metrics-url", ",".join(info["metrics"]), "--save", str(result)],
            timeout=900,
        )  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"bench ({mode}) failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        diag = run([sys.executable, "-m", "toolchain.cli.main", "diagnose", "--bench", str(result), "--json"])
        doc = json.loads(result.read_text())
        run0 = doc["runs"][0]
        return {
            "summary": run0["summary"],
            "server": run0.get("server"),
            "wall_s": run0["summary"]["wall_s"],
            "findings": json.loads(diag.stdout)["findings"] if diag.returncode == 0 else diag.stderr,
        }
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()


def _ratio(m: dict[str, Any]) -> float:
    return float(m["p99"]) / float(m["p50"]) if m.get("p50") else float("nan")


def table(res: dict[str, dict[str, Any]]) -> str:
    rows = ["| topology (2 workers) | TTFT P50 | TTFT P99 | TTFT P99/P50 | TPOT P50 | TPOT P99 | TPOT P99/P50 | "
            "ICL P50 | ICL P99 | req/s |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for mode, r in res.items():
        s = r["summary"]
        t, p, i = s["ttft_ms"], s["tpot_ms"], s.get("icl_ms") or {"p50": float("nan"), "p99": float("nan")}
        label = "aggregated (2 × prefill+decode)" if mode == "aggregated" else "disaggregated (1 prefill + 1 decode)"
        rows.append(
            f"| {label} | {t['p50']:.1f} | {t['p99']:.1f} | {_ratio(t):.1f} | {p['p50']:.2f} | {p['p99']:.2f} | "
            f"{_ratio(p):.1f} | {i['p50']:.2f} | {i['p99']:.2f} | {s['request_throughput_rps']:.2f} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--long-fraction", type=float, default=0.2)
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=None, help="Write results.json and table.md here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dynamo-disagg-") as t:
        tmp = Path(t)
        data = workload(tmp / "prompts.jsonl", args.requests + 2, args.long_fraction, seed=11)
        res = {mode: bench_mode(mode, spec, data, tmp, args) for mode, spec in specs(tmp).items()}
    md = table(res)
    print(md)
    agg = res["aggregated"]["findings"]
    rules = [f["rule"] for f in agg] if isinstance(agg, list) else agg
    print(f"\ndiagnose on the aggregated run: {rules}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, **res},
                                                          indent=1, default=str))  # fmt: skip
        (args.out / "table.md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
