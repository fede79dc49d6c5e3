"""`toolchain matrix`: the CI engine matrix — one build job per cell, one quantize job per model,
precision and parallel mapping, runner labels per GPU class, cached cells marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.keys import build_job_id, quantize_job_id
from toolchain.errors import CompatibilityError, UserInputError
from toolchain.specs.loader import load_spec, safe_yaml
from toolchain.specs.rules import require_compatible

DEFAULT_RUNNERS = {
    "A100-40GB-SXM": "gpu-a100",
    "A100-80GB-SXM": "gpu-a100",
    "A10G": "gpu-a10g",
    "L4": "gpu-l4",
    "L40S": "gpu-l40s",
    "H100-SXM": "gpu-h100",
    "H100-PCIe": "gpu-h100-pcie",
    "H100-NVL": "gpu-h100-nvl",
    "H200-SXM": "gpu-h200",
    "B200": "gpu-b200",
    "GB200": "gpu-gb200",
}


def load_runner_map(path: Path | None) -> dict[str, str]:
    m = dict(DEFAULT_RUNNERS)
    if path is None:
        return m
    try:
        data = safe_yaml(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise UserInputError(
            f"cannot read runner map {path}: {e.strerror or e}", "give a YAML mapping GPU name -> runner label"
        ) from e
    except (yaml.YAMLError, ValueError, TypeError) as e:  # UnicodeDecodeError is a ValueError
        problem = getattr(e, "problem", None) or str(e).splitlines()[0][:120]
        raise UserInputError(
            f"runner map {path} is not a small plain YAML file: {problem}",
            "give a YAML mapping GPU name -> runner label",
        ) from e
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise UserInputError(f"{path} must map GPU catalog names to runner labels")
    m.update(data)
    return m


def build_matrix(
    specs: list[Path], *, registry: Any = None, runners: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    runners = runners or DEFAULT_RUNNERS
    quantize: dict[str, dict[str, Any]] = {}
    builds: list[dict[str, Any]] = []
    for path in specs:
        spec = load_spec(path)
        try:
            require_compatible(spec)  # the rules `spec validate` applies: no CI job for a cell that cannot build
        except CompatibilityError as e:
            raise CompatibilityError(f"{path}: {e.message}", e.hint) from e
        for art in for_cells(spec):
            cell, q = art.cell, spec.quantization
            qid = quantize_job_id(art.quantized_key)
            runner = runners.get(cell.gpu.name)
            if runner is None:
                raise UserInputError(f"no runner label for GPU {cell.gpu.name}", "add it to the --runner-map file")
            quantize.setdefault(
                qid,
                {
                    "id": qid,
                    "spec": str(path),
                    "weights": q.weights,
                    "kv_cache": q.kv_cache,
                    "tp": cell.tp,
                    "pp": cell.pp,
                    "runner": runner,
                },
            )
            key = art.engine_key
            builds.append(
                {
                    "id": build_job_id(spec, cell),
                    "spec": str(path),
                    "cell": cell.id,
                    "gpu": cell.gpu.name,
                    "runner": runner,
                    "world_size": cell.world_size,
                    "engine_key": key,
                    "cached": bool(key and registry is not None and registry.exists(key)),
                    "needs": qid,
                }
            )
    return {"quantize": list(quantize.values()), "build": builds}


def github(m: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Outputs for `strategy.matrix: ${{ fromJSON(...) }}`: {"include": [...]} per job kind."""
    return {"quantize": {"include": m["quantize"]}, "build": {"include": m["build"]}}


def gitlab(m: dict[str, list[dict[str, Any]]], registry_var: str = "$TOOLCHAIN_REGISTRY") -> dict[str, Any]:
    """A child pipeline: one quantize job per group, one build job per cell needing its group."""
    doc: dict[str, Any] = {
        "stages": ["quantize", "build"],
        "default": {
            "image": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
            "before_script": ["scripts/setup.sh"],
        },
    }
    for q in m["quantize"]:
        doc[q["id"]] = {
            "stage": "quantize",
            "tags": [q["runner"]],
            "script": [f".venv/bin/toolchain quantize {q['spec']} --device cuda --registry {registry_var}"],
        }
    for b in m["build"]:
        job: dict[str, Any] = {
            "stage": "build",
            "tags": [b["runner"]],
            "needs": [b["needs"]],
            "variables": {"ENGINE_KEY": b["engine_key"] or ""},
            "script": [f".venv/bin/toolchain build {b['spec']} --cell {b['cell']} --registry {registry_var}"],
            "artifacts": {"when": "always", "paths": ["logs/"]},
        }
        if b["cached"]:
            job["rules"] = [{"when": "never"}]  # already in the registry
        doc[b["id"]] = job
    return doc
