"""`toolchain quantize`: quantize a spec's checkpoint once per parallel mapping (or one checkpoint from flags),
and store each result in a registry when asked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.recipe import Recipe, is_unquantized
from toolchain.artifacts.source import source_dir
from toolchain.errors import UserInputError
from toolchain.progress import Progress, silent
from toolchain.quantize.run import QuantizeResult, quantize
from toolchain.registry import open_registry
from toolchain.specs.gate import checked_spec
from toolchain.specs.speculative_spec import draft_spec


@dataclass(frozen=True)
class QuantizeJob:
    source: Path
    recipe: Recipe
    out: Path
    accuracy_limits: Any = None
    reuse: bool = False
    input_digest: str | None = None
    registry_key: str | None = None  # the quantized-checkpoint key (spec jobs only)


@dataclass
class QuantizeOutcome:
    job: QuantizeJob
    result: QuantizeResult
    stored_as: str | None = None
    registry_url: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.result.out), "reused": self.result.reused, "manifest": self.result.manifest}


def spec_jobs(
    spec_path: Path, *, out: Path | None = None, force: bool = False, progress: Progress = silent
) -> list[QuantizeJob]:
    """One job per (TP, PP) mapping of the spec's cells, then of a draft-target spec's draft model; ``out``
    replaces the first job's cache directory."""
    spec = checked_spec(spec_path)  # the rules `spec validate` applies (specs.gate)
    has_draft = spec.speculative is not None and spec.speculative.draft is not None
    todo = [s for s in (spec, draft_spec(spec) if has_draft else None) if s is not None and not is_unquantized(s)]
    if not todo:
        raise UserInputError(
            f"spec {spec.name} asks for no quantization",
            "nothing to do; `toolchain build` converts the checkpoint directly",
        )
    jobs: list[QuantizeJob] = []
    for s in todo:  # the model, then a draft-target spec's draft model
        src = source_dir(s, progress)  # an hf:// source is downloaded: progress says what it waits on
        by_mapping = {(a.cell.tp, a.cell.pp): a for a in for_cells(s)}
        for mapping in sorted(by_mapping):
            art = by_mapping[mapping]
            jobs.append(
                QuantizeJob(
                    source=src,
                    recipe=art.recipe,
                    out=out if (out is not None and not jobs) else art.quantized_dir,
                    accuracy_limits=s.quantization.accuracy,
                    reuse=not force,
                    input_digest=(art.source or {}).get("digest"),
                    registry_key=art.quantized_key,
                )
            )
    return jobs


def run_quantize(
    target: Path | QuantizeJob,
    *,
    out: Path | None = None,
    device: str = "cpu",
    device_map: str | None = None,
    force: bool = False,
    rehash: bool = False,
    allow_pickle: bool = False,
    gate: str = "auto",
    registry: str | None = None,
    progress: Progress = silent,
) -> list[QuantizeOutcome]:
    """Quantize a spec (``target`` is its path: one job per parallel mapping) or one job built from flags; with
    ``registry``, store each spec job's checkpoint under its quantized-checkpoint key. A reused checkpoint is
    trusted by its verified stat signatures unless ``rehash`` reads it all again."""
    jobs = spec_jobs(target, out=out, force=force, progress=progress) if isinstance(target, Path) else [target]
    outcomes = []
    for job in jobs:
        res = quantize(
            job.source,
            job.recipe,
            job.out,
            device=device,
            device_map=device_map,
            force=force,
            rehash=rehash,
            allow_pickle=allow_pickle,
            accuracy_limits=job.accuracy_limits,
            gate_method=gate,
            reuse=job.reuse,
            input_digest=job.input_digest,
            progress=progress,
        )
        outcome = QuantizeOutcome(job, res)
        if registry and job.registry_key is not None:
            reg = open_registry(registry)
            if not reg.exists(job.registry_key):
                reg.put(
                    job.registry_key,
                    res.out,
                    kind="quantized-checkpoint",
                    provenance={"recipe": job.recipe.to_json(), "input_digest": res.manifest["input_digest"]},
                )
            outcome.stored_as, outcome.registry_url = job.registry_key, reg.url
        outcomes.append(outcome)
    return outcomes
