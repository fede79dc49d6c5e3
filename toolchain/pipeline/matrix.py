"""`toolchain matrix`: the CI engine matrix — one build job per cell, one quantize job per model,
precision and parallel mapping, runner labels per GPU class, cached cells marked.

The CI formats carry only the work still to do: a cell whose engine is already in the registry gets no
job (no GPU runner is taken for it), and a quantize group gets a job only when one of its cells does.
GitHub Actions allows at most 256 jobs per matrix and 1 MB of outputs per job
(docs.github.com "Running variations of jobs in a workflow" and "Passing information between jobs"):
the build list is split into matrices of at most 256 jobs, as many as the workflow has build stages
(``GITHUB_BUILD_STAGES``), and the whole output is checked against the size limit.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.keys import build_job_id, quantize_job_id
from toolchain.compile.draft import draft_artifacts
from toolchain.errors import CompatibilityError, UserInputError
from toolchain.specs.loader import load_spec, safe_yaml
from toolchain.specs.rules import require_compatible

FORMATS = ("github", "gitlab", "json")  # what `toolchain matrix` prints: a GitHub matrix, a GitLab child pipeline
CI_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"  # TensorRT-LLM 1.1.0
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
    # What the registry holds comes from one listing, fetched while the keys are computed.
    with ThreadPoolExecutor(max_workers=1) as pool:
        listing = pool.submit(registry.keys) if registry is not None else None
        _add_jobs(specs, runners, quantize, builds)
        held = set(listing.result()) if listing is not None else set()
    for b in builds:  # a draft-target cell is cached only when its draft engine is held too
        b["cached"] = b["engine_key"] in held and (b["draft_engine_key"] is None or b["draft_engine_key"] in held)
    return {"quantize": list(quantize.values()), "build": builds}


def _add_jobs(
    specs: list[Path], runners: dict[str, str], quantize: dict[str, dict[str, Any]], builds: list[dict[str, Any]]
) -> None:
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
            draft = draft_artifacts(art)
            builds.append(
                {
                    "id": build_job_id(spec, cell),
                    "spec": str(path),
                    "cell": cell.id,
                    "gpu": cell.gpu.name,
                    "runner": runner,
                    "world_size": cell.world_size,
                    "engine_key": key,
                    "draft_engine_key": draft.engine_key if draft is not None else None,
                    "cached": False,
                    "needs": qid,
                }
            )


GITHUB_MAX_JOBS = 256  # per matrix
GITHUB_MAX_OUTPUT_BYTES = 1_000_000  # all outputs of one job
GITHUB_BUILD_STAGES = 4  # build-0 .. build-3 in ci/github/engine-matrix.yml


def pending(m: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Only what is not in the registry yet: uncached builds and the quantize groups they need."""
    builds = [b for b in m["build"] if not b["cached"]]
    needed = {b["needs"] for b in builds}
    return {"quantize": [q for q in m["quantize"] if q["id"] in needed], "build": builds}


def github(m: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Outputs for `strategy.matrix: ${{ fromJSON(...) }}`: ``quantize`` and ``build_0`` .. ``build_3``
    ({"include": [...]}, at most 256 jobs each), their job counts, and the ids of cached cells."""
    todo = pending(m)
    if len(todo["quantize"]) > GITHUB_MAX_JOBS:
        raise UserInputError(
            f"{len(todo['quantize'])} quantize jobs exceed GitHub's {GITHUB_MAX_JOBS} jobs per matrix",
            "split the specs over several workflow runs (toolchain matrix SPEC... per run)",
        )
    builds = todo["build"]
    chunks = [builds[i : i + GITHUB_MAX_JOBS] for i in range(0, len(builds), GITHUB_MAX_JOBS)]
    if len(chunks) > GITHUB_BUILD_STAGES:
        raise UserInputError(
            f"{len(builds)} build jobs need {len(chunks)} matrices of {GITHUB_MAX_JOBS}; the workflow has "
            f"{GITHUB_BUILD_STAGES} build stages",
            "split the specs over several workflow runs, or add build stages to ci/github/engine-matrix.yml",
        )
    out: dict[str, Any] = {"quantize": {"include": todo["quantize"]}, "quantize_count": len(todo["quantize"])}
    for i in range(GITHUB_BUILD_STAGES):
        chunk = chunks[i] if i < len(chunks) else []
        out[f"build_{i}"] = {"include": chunk}
        out[f"build_{i}_count"] = len(chunk)
    out["cached"] = [b["id"] for b in m["build"] if b["cached"]]
    size = len(json.dumps(out, separators=(",", ":")).encode())
    if size > GITHUB_MAX_OUTPUT_BYTES:
        raise UserInputError(
            f"the matrix is {size:,} bytes; GitHub allows {GITHUB_MAX_OUTPUT_BYTES:,} bytes of job outputs",
            "split the specs over several workflow runs",
        )
    return out


def gitlab(m: dict[str, list[dict[str, Any]]], image: str = CI_IMAGE) -> dict[str, Any]:
    """A child pipeline: one quantize job per group still needed, one build job per cell not in the registry
    (cached cells get no job at all); every job runs scripts/ci-gpu-job.sh in NVIDIA's container."""
    todo = pending(m)
    doc: dict[str, Any] = {
        "stages": ["quantize", "build"],
        "default": {"image": image},
        "variables": {"TOOLCHAIN_CACHE": "$CI_PROJECT_DIR/.toolchain-cache"},
    }
    logs = {"when": "always", "paths": [".toolchain-cache/logs/"]}
    for q in todo["quantize"]:
        doc[q["id"]] = {
            "stage": "quantize",
            "tags": [q["runner"]],
            "script": [f"scripts/ci-gpu-job.sh quantize {q['spec']}"],
            "artifacts": logs,
        }
    for b in todo["build"]:
        doc[b["id"]] = {
            "stage": "build",
            "tags": [b["runner"]],
            "needs": [b["needs"]] if b["needs"] in doc else [],
            "variables": {"ENGINE_KEY": b["engine_key"] or ""},
            "script": [f"scripts/ci-gpu-job.sh build {b['spec']} {b['cell']}"],
            "artifacts": logs,
        }
    if not todo["build"] and not todo["quantize"]:  # a child pipeline needs one job: a CPU one that says so
        doc["nothing-to-build"] = {
            "stage": "build",
            "image": "busybox",
            "script": [f"echo every engine is in the registry ({len(m['build'])} cells)"],
        }
    return doc
