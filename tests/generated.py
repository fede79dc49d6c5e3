"""Inputs that tests and benchmarks generate rather than ship: a large spec matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def make_spec(path: Path, cells: int, source: str | None = None) -> Path:
    """llama-3.1-8b-fp8.yaml with a matrix of ``cells`` cells (a multiple of 200)."""
    import yaml

    d: dict[str, Any] = yaml.safe_load((REPO / "engine_specs" / "llama-3.1-8b-fp8.yaml").read_text())
    batches = max(1, cells // 200)
    d["name"] = f"matrix-{cells}"
    d["matrix"] = {
        "gpu": ["H100-SXM", "H200-SXM"],
        "max_batch_size": [64 + 8 * i for i in range(batches)],
        "max_seq_len": [4096 + 1024 * i for i in range(10)],
        "max_input_len": [256 * (i + 1) for i in range(10)],
    }
    if source is not None:
        d["model"]["source"] = source
        d["model"].pop("architecture", None)
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path
