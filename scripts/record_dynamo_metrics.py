"""Record the Prometheus metric families NVIDIA Dynamo 1.6.1 serves, off a live run on 127.0.0.1 (the reference
that tests/deploy/test_dynamo_observability.py holds every Dynamo alert and dashboard query against).

The run is `toolchain dynamo up`'s topology for the shipped disaggregated spec cut to one prefill and one decode
worker: the real ``dynamo.frontend`` (KV router) and ``dynamo.mocker --engine-type trtllm`` workers (the stand-in for
``dynamo.trtllm``). Three streaming chat completions go through, then each ``/metrics`` page is scraped and every
``# TYPE`` line is kept with the label names its samples carry and, for histograms, the bucket bounds. Per family the
file says which processes export it (frontend, prefill, decode): the frontend's families and the workers'
``dynamo_component_*`` / ``dynamo_work_handler_*`` come from Dynamo's own runtime and are what a real deployment
exports; families only the mocker writes (``trtllm:*``) are marked ``"stand_in_only": true``.

Usage: PYTHONPATH=. .venv/bin/python scripts/record_dynamo_metrics.py tests/reference/metrics/dynamo_1.6.1.json
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "engine_specs" / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def families(page: str) -> dict[str, dict[str, Any]]:
    """name -> {kind, labels, buckets} of one exposition page."""
    out: dict[str, dict[str, Any]] = {}
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            out[name] = {"kind": kind, "labels": set(), "buckets": []}
    for line in page.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, labels = m.group(1), dict(LABEL.findall(m.group(2) or ""))
        base = next((name.removesuffix(s) for s in ("_bucket", "_count", "_sum") if name.removesuffix(s) in out), name)
        fam = out.get(base) or out.setdefault(name, {"kind": "untyped", "labels": set(), "buckets": []})
        fam["labels"] |= set(labels) - {"le"}
        if name.endswith("_bucket") and "le" in labels and labels["le"] not in fam["buckets"]:
            fam["buckets"].append(labels["le"])
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    from toolchain.dynamo.pipeline import up

    d = yaml.safe_load(SPEC.read_text())
    d["dynamo"].update(prefill={"tp": 2, "replicas": 1}, decode={"tp": 2, "replicas": 1})
    with tempfile.TemporaryDirectory() as td:
        spec = Path(td) / "spec.yaml"
        spec.write_text(yaml.safe_dump(d, sort_keys=False))
        _planned, started = up(spec, workdir=Path(td) / "run")
        dep: Any = started
        pages: dict[str, str] = {}
        try:
            for _ in range(3):
                body = {
                    "model": dep.model,
                    "messages": [{"role": "user", "content": "tell me about the sea " * 40}],
                    "max_tokens": 16,
                    "stream": True,
                }
                req = urllib.request.Request(
                    dep.url + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
                )
                with urllib.request.urlopen(req, timeout=60) as r:
                    r.read()
            pages["frontend"] = urllib.request.urlopen(dep.frontend_metrics_url, timeout=10).read().decode()
            for p in dep.procs:
                if p.metrics_url:
                    pages[p.name.split("-")[0]] = urllib.request.urlopen(p.metrics_url, timeout=10).read().decode()
        finally:
            dep.stop()
    merged: dict[str, dict[str, Any]] = {}
    for role, page in pages.items():
        for name, fam in families(page).items():
            m = merged.setdefault(name, {"kind": fam["kind"], "labels": set(), "buckets": fam["buckets"], "from": []})
            m["labels"] |= fam["labels"]
            m["from"].append(role)
    out = {
        "source": "NVIDIA Dynamo 1.6.1 (PyPI ai-dynamo==1.6.1, ai-dynamo-runtime==1.6.1): /metrics of a live "
        "dynamo.frontend (--router-mode kv) and one prefill and one decode `dynamo.mocker --engine-type trtllm` "
        "worker (DYN_SYSTEM_PORT status servers), file discovery, 127.0.0.1, after three streaming chat "
        "completions; recorded by scripts/record_dynamo_metrics.py. The names are the constants of Dynamo's "
        "dynamo/prometheus_names.py (generated from lib/runtime/src/metrics/prometheus_names.rs), with the "
        "dynamo_frontend_ / dynamo_component_ prefixes its runtime adds",
        "recorded": datetime.date.today().isoformat(),
        "families": {
            name: {
                "kind": f["kind"],
                "labels": sorted(f["labels"]),
                **({"buckets": f["buckets"]} if f["buckets"] else {}),
                "from": sorted(set(f["from"])),
                **({"stand_in_only": True} if name.startswith("trtllm:") else {}),
            }
            for name, f in sorted(merged.items())
        },
    }
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(out['families'])} families from {', '.join(pages)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
