"""`toolchain matrix`: the CI engine matrix — one build job per cell, one quantize job per model,
precision and parallel mapping, runner labels per GPU class, cached cells marked.

The CI formats carry only the work still to do: a cell whose engine is already in the registry gets no
job (no GPU runner is taken for it), and a quantize group gets a job only when one of its cells does.
GitHub Actions allows at most 256 jobs per matrix and 1 MB of outputs per job
(docs.github.com "Running variations of jobs in a workflow" and "Passing information between jobs"):
the build list is split into matrices of at most 256 jobs, as many as the workflow has build stages
(``GITHUB_BUILD_STAGES``), and the whole output is checked against the size limit.
GitLab has no per-matrix limit here (the child pipeline lists its jobs one by one), but a pipeline may hold at
most ``ci_pipeline_size`` jobs — 500 on GitLab.com's Free tier, the smallest documented default, 1500 on
Premium, 2000 on Ultimate, unlimited on a self-managed instance unless its admin sets one — and a dynamic child
pipeline's YAML comes from an artifact of at most 5 MB (``max_artifacts_content_include_size``): GitLab docs
``doc/user/gitlab_com/_index.md`` ("Maximum jobs in a single pipeline") and ``doc/administration/cicd/limits.md``
("Maximum number of jobs in a pipeline", "Maximum size of the CI artifacts archive"). Both are checked.

Every job runs in the container its spec names (``target.container``); a spec that names none gets the Triton
TensorRT-LLM container that ships its ``target.trtllm_version`` (``toolchain.specs.releases``), so the
TensorRT-LLM version in the engine key is the one the job builds with. Keys with no value are left out of every
entry (a ``null`` in an inlined matrix fails GitHub's workflow schema).
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from toolchain import yamlout
from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.keys import build_job_id, quantize_job_id
from toolchain.compile.draft import draft_artifacts
from toolchain.errors import UserInputError
from toolchain.specs.gate import checked_spec
from toolchain.specs.loader import safe_yaml
from toolchain.specs.models import EngineSpec
from toolchain.specs.releases import triton_container

FORMATS = ("github", "gitlab", "json", "kubernetes", "argo")  # GitHub matrix, GitLab child pipeline, Jobs, Workflow
CI_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"  # TensorRT-LLM 1.1.0
CPU_IMAGE = "busybox:1.37"  # the child pipeline's one CPU job when nothing is left to build
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


def job_container(spec: EngineSpec, path: Path) -> str:
    """The image a spec's CI jobs run in: its ``target.container``, else the newest Triton TensorRT-LLM
    container that ships its ``target.trtllm_version``."""
    if spec.target.container:
        return spec.target.container
    image = triton_container(spec.target.trtllm_version)
    if image is not None:
        return image
    raise UserInputError(
        f"{path}: no target.container, and no Triton container ships TensorRT-LLM {spec.target.trtllm_version}",
        "set target.container to the image that has that release (the CI jobs run in it)",
    )


def _present(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry without its absent (None) values."""
    return {k: v for k, v in entry.items() if v is not None}


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
        draft = b.get("draft_engine_key")
        b["cached"] = b.get("engine_key") in held and (draft is None or draft in held)
    return {"quantize": list(quantize.values()), "build": builds}


def _add_jobs(
    specs: list[Path], runners: dict[str, str], quantize: dict[str, dict[str, Any]], builds: list[dict[str, Any]]
) -> None:
    for path in specs:
        spec = checked_spec(path)  # the rules `spec validate` applies (specs.gate): no job for a refused cell
        for art in for_cells(spec):
            cell, q = art.cell, spec.quantization
            container = job_container(spec, path)
            qid = quantize_job_id(art.quantized_key)
            runner = runners.get(cell.gpu.name)
            if runner is None:
                raise UserInputError(f"no runner label for GPU {cell.gpu.name}", "add it to the --runner-map file")
            quantize.setdefault(
                qid,
                _present(
                    {
                        "id": qid,
                        "spec": str(path),
                        "weights": q.weights,
                        "kv_cache": q.kv_cache,
                        "tp": cell.tp,
                        "pp": cell.pp,
                        "runner": runner,
                        "container": container,
                    }
                ),
            )
            key = art.engine_key
            draft = draft_artifacts(art)
            builds.append(
                _present(
                    {
                        "id": build_job_id(spec, cell),
                        "spec": str(path),
                        "cell": cell.id,
                        "gpu": cell.gpu.name,
                        "runner": runner,
                        "container": container,
                        "world_size": cell.world_size,
                        "engine_key": key,
                        "draft_engine_key": draft.engine_key if draft is not None else None,
                        "cached": False,
                        "needs": qid,
                    }
                )
            )


GITHUB_MAX_JOBS = 256  # per matrix
GITHUB_MAX_OUTPUT_BYTES = 1_000_000  # all outputs of one job
GITHUB_BUILD_STAGES = 4  # build-0 .. build-3 in ci/github/engine-matrix.yml
GITLAB_MAX_JOBS = 500  # jobs in one pipeline: GitLab.com Free tier (Premium 1500, Ultimate 2000)
GITLAB_MAX_YAML_BYTES = 5 * 2**20  # a dynamic child pipeline's YAML artifact (max_artifacts_content_include_size)


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


def gitlab(
    m: dict[str, list[dict[str, Any]]], image: str | None = None, *, max_jobs: int = GITLAB_MAX_JOBS
) -> dict[str, Any]:
    """A child pipeline: one quantize job per group still needed, one build job per cell not in the registry
    (cached cells get no job at all); every job runs scripts/ci-gpu-job.sh in its spec's container (``image``
    overrides it for every job). At most ``max_jobs`` jobs (GitLab's ``ci_pipeline_size``) and 5 MB of YAML."""
    todo = pending(m)
    n = len(todo["quantize"]) + len(todo["build"])
    if n > max_jobs:
        raise UserInputError(
            f"{n} jobs exceed the {max_jobs} jobs GitLab allows in one pipeline "
            f"({'GitLab.com Free tier' if max_jobs == GITLAB_MAX_JOBS else '--gitlab-max-jobs'})",
            "split the specs over several pipelines (toolchain matrix SPEC... per pipeline), or pass "
            "--gitlab-max-jobs with your plan's limit (GitLab.com Premium 1500, Ultimate 2000)",
        )
    doc: dict[str, Any] = {
        "stages": ["quantize", "build"],
        # an OIDC token for AWS role assumption (scripts/ci-aws-web-identity.sh); unused with static keys
        "default": {"id_tokens": {"AWS_ID_TOKEN": {"aud": "sts.amazonaws.com"}}},
        "variables": {"TOOLCHAIN_CACHE": "$CI_PROJECT_DIR/.toolchain-cache"},
    }
    for q in todo["quantize"]:
        doc[q["id"]] = {
            "stage": "quantize",
            "image": image or q.get("container", CI_IMAGE),
            "tags": [q["runner"]],
            "script": [shlex.join(["scripts/ci-gpu-job.sh", "quantize", q["spec"]])],
            "artifacts": {"when": "always", "paths": [".toolchain-cache/logs/"]},
        }
    for b in todo["build"]:
        doc[b["id"]] = {
            "stage": "build",
            "image": image or b.get("container", CI_IMAGE),
            "tags": [b["runner"]],
            "needs": [b["needs"]] if b["needs"] in doc else [],
            "variables": {"ENGINE_KEY": b.get("engine_key") or ""},
            "script": [shlex.join(["scripts/ci-gpu-job.sh", "build", b["spec"], b["cell"]])],
            "artifacts": {"when": "always", "paths": [".toolchain-cache/logs/"]},
        }
    if not todo["build"] and not todo["quantize"]:  # a child pipeline needs one job: a CPU one that says so
        doc["nothing-to-build"] = {
            "stage": "build",
            "image": CPU_IMAGE,
            "script": [shlex.join(["echo", f"every engine is in the registry ({len(m['build'])} cells)"])],
        }
    size = len(gitlab_yaml(doc).encode())
    if size > GITLAB_MAX_YAML_BYTES:
        raise UserInputError(
            f"the child pipeline is {size:,} bytes; GitLab reads at most {GITLAB_MAX_YAML_BYTES:,} bytes "
            "of a dynamic child pipeline",
            "split the specs over several pipelines",
        )
    return doc


def gitlab_yaml(doc: dict[str, Any]) -> str:
    """The child pipeline as the YAML `toolchain matrix --format gitlab` prints."""
    return yamlout.dump(doc, sort_keys=False)
