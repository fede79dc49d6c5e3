"""Identity: the source checkpoint, engine keys, profile ids, quantized-checkpoint and timing-cache keys,
CI job ids. Every key is the sha256 of the canonical JSON of what it stands for (``toolchain.digest``).

- **source identity**: the content digest of a local checkpoint (``{"digest": "sha256:..."}``) or
  ``{"hf": repo, "revision": rev}`` for an ``hf://`` source. Computing it reads the checkpoint (a stat cache
  skips unchanged files), so a run computes it once and passes it on (``toolchain.artifacts.cell``).
- **engine key**: source identity, the quantizer, GPU (full NVML name and compute capability), TP/PP, the cell
  shape and every spec field declared ``build`` in ``toolchain.specs.fields``.
- **profile id**: the engine key plus every ``runtime`` field; changing a runtime knob never rebuilds.
- **quantized-checkpoint key**: source identity + recipe + quantizer. It names the registry entry of a
  quantized checkpoint, its cache directory (first 12 hex) and the CI quantize job (``q-`` + 12 hex).
- **timing-cache key**: GPU + TensorRT-LLM + TensorRT versions (a TensorRT timing cache is only valid there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import QUANTIZER, Recipe, is_unquantized
from toolchain.digest import canonical_json, sha256_text, shared_stat_cache
from toolchain.digest import dir_digest as dir_digest  # re-exported: tests and benchmarks count calls
from toolchain.specs.fields import values_in_scope
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.sources import hf_repo_revision

KEY_SCHEMA = 1

SourceIdentity = dict[str, Any]


def directory_digest(path: Path) -> str:
    """Content digest of a checkpoint directory, with the cache's stat cache so unchanged files are not re-read."""
    stat_cache = shared_stat_cache(cache().statcache)
    digest = dir_digest(path, cache=stat_cache)
    stat_cache.save()
    return digest


def source_identity(spec: EngineSpec) -> SourceIdentity | None:
    """What the input checkpoint is: its content digest, or repo@revision; None if it is not there yet."""
    if spec.model.is_hf:
        repo, rev = spec.model.hf_repo_revision()
        return {"hf": repo, "revision": rev or "main"}
    path = spec.local_source()
    assert path is not None
    if not (path / "config.json").is_file():
        return None
    return {"digest": directory_digest(path)}


def pending_source(spec: EngineSpec) -> SourceIdentity:
    """Stands for a local checkpoint that is not there yet (CI plans jobs before any checkpoint exists)."""
    return {"source": spec.model.source}


def key_material(cell: Cell, source: SourceIdentity) -> dict[str, Any]:
    spec = cell.spec
    # the draft model of draft-target is its own engine with its own key (toolchain.specs.speculative)
    build = values_in_scope(spec, "build", skip=("matrix.", "parallelism.", "model.source", "speculative.draft."))
    material: dict[str, Any] = {
        "schema": KEY_SCHEMA,
        "checkpoint": source,
        "quantizer": None if is_unquantized(spec) else QUANTIZER,
        "gpu": {"nvml_name": cell.gpu.nvml_name, "compute_capability": cell.gpu.compute_capability},
        "mapping": {"tp": cell.tp, "pp": cell.pp},
        "shape": {
            "max_batch_size": cell.max_batch_size,
            "max_seq_len": cell.max_seq_len,
            "max_input_len": cell.max_input_len,
        },
        "build": build,
    }
    heads = heads_identity(spec)
    if heads is not None:
        material["speculative_heads"] = heads
    if spec.runtime == "pytorch":
        material["llmapi"] = llmapi_identity(cell)
    return material


def llmapi_identity(cell: Cell) -> dict[str, Any]:
    """A PyTorch-runtime artifact is its checkpoint, its LLM-API options file and the models it carries
    (draft, LoRA adapters; ``toolchain.specs.llmapi.bundled_models``): the options as written, and each
    carried directory's content digest (or repo@revision). Editing a local adapter, pointing the spec at
    another one, or changing an option makes another artifact."""
    from toolchain.errors import CompatibilityError
    from toolchain.specs.llmapi import bundled_models, llmapi_options

    carried: dict[str, Any] = {}
    for rel, source in sorted(bundled_models(cell.spec).items()):
        path = Path(source)
        if source.startswith("hf://"):
            repo, rev = hf_repo_revision(source)
            carried[rel] = {"hf": repo, "revision": rev or "main"}  # as source_identity names an unpinned one
        elif path.is_dir():
            carried[rel] = {"digest": directory_digest(path)}
        else:
            carried[rel] = {"source": source}  # not there yet (CI plans jobs before anything exists)
    try:
        options: Any = llmapi_options(cell)
    except CompatibilityError as e:  # spec validation refuses the spec; a key still needs to be computable
        options = {"unsupported": str(e)}
    return {"options": options, "carried": carried}


def heads_identity(spec: EngineSpec) -> SourceIdentity | None:
    """Content digest of a local Medusa/EAGLE heads checkpoint (converted into the engine's weights)."""
    sd = spec.speculative
    if sd is None or sd.heads is None or sd.heads.source.startswith("hf://"):
        return None
    p = Path(sd.heads.source).expanduser()
    p = p if p.is_absolute() else (spec.base_dir / p).resolve()
    return {"digest": directory_digest(p)} if p.is_dir() else None


def engine_key(cell: Cell, source: SourceIdentity) -> str:
    return sha256_text(canonical_json(key_material(cell, source)))


def profile_id(cell: Cell, key: str) -> str:
    runtime = values_in_scope(cell.spec, "runtime")
    return sha256_text(canonical_json({"schema": KEY_SCHEMA, "engine_key": key, "runtime": runtime}))


def quantized_key(source: SourceIdentity, recipe: Recipe) -> str:
    """The one identity of a quantized checkpoint (registry key; cache directory and CI job id derive from it)."""
    return sha256_text(
        canonical_json(
            {"kind": "quantized-checkpoint", "checkpoint": source, "recipe": recipe.to_json(), "quantizer": QUANTIZER}
        )
    )


def timing_cache_key(cell: Cell) -> str:
    t = cell.spec.target
    return sha256_text(
        canonical_json(
            {
                "kind": "timing-cache",
                "gpu": cell.gpu.nvml_name,
                "trtllm": t.trtllm_version,
                "tensorrt": t.tensorrt(),
            }
        )
    )


def quantize_job_id(qkey: str) -> str:
    """CI job id of the quantize job that produces the quantized checkpoint ``qkey``."""
    return f"q-{qkey[:12]}"


def build_job_id(spec: EngineSpec, cell: Cell) -> str:
    """CI job id of the build job of one cell."""
    return f"{spec.name}--{cell.id}"
