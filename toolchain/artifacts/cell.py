"""Everything one matrix cell's artifacts are called and where they live, from one source identity."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from toolchain.artifacts.keys import (
    SourceIdentity,
    engine_key,
    pending_source,
    profile_id,
    quantized_key,
    source_identity,
    timing_cache_key,
)
from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import Recipe, recipe_from_spec
from toolchain.errors import SpecError, TritonRepoError
from toolchain.specs.matrix import Cell, expand
from toolchain.specs.models import EngineSpec
from toolchain.specs.sources import missing_checkpoint_hint


@dataclass(frozen=True)
class CellArtifacts:
    """Keys and paths of one cell. ``source`` is None while a local checkpoint is not there yet."""

    cell: Cell
    source: SourceIdentity | None

    @property
    def spec(self) -> EngineSpec:
        return self.cell.spec

    def require_source(self) -> SourceIdentity:
        if self.source is None:
            where = self.spec.local_source()
            raise SpecError(
                f"checkpoint not found at {where}",
                hint=missing_checkpoint_hint(self.spec.name, Path(str(where))),
            )
        return self.source

    @cached_property
    def engine_key(self) -> str | None:
        return engine_key(self.cell, self.source) if self.source is not None else None

    @cached_property
    def profile_id(self) -> str | None:
        return profile_id(self.cell, self.engine_key) if self.engine_key else None

    @property
    def recipe(self) -> Recipe:
        return recipe_from_spec(self.spec, self.cell.tp, self.cell.pp)

    @cached_property
    def quantized_key(self) -> str:
        return quantized_key(self.source or pending_source(self.spec), self.recipe)

    @property
    def timing_cache_key(self) -> str:
        return timing_cache_key(self.cell)

    @property
    def quantized_dir(self) -> Path:
        r = self.recipe
        return cache().quantized(self.spec.name, r.weights, r.tp, r.pp, self.quantized_key)

    def tokenizer_dir(self) -> Path:
        """The quantized checkpoint's tokenizer, else the source checkpoint's."""
        q = self.quantized_dir / "trtllm"
        for d in (q, self.quantized_dir / "hf"):  # hf/ alone for a family with no TensorRT-LLM checkpoint
            if (d / "tokenizer.json").is_file():
                return d
        local = self.spec.local_source()
        if local is not None and (local / "tokenizer.json").is_file():
            return local
        raise TritonRepoError(
            f"no tokenizer for cell {self.cell.id} (looked in {q} and the model source)",
            "run `toolchain quantize SPEC`, or point model.source at a checkpoint with tokenizer files",
        )

    def identity(self) -> dict[str, Any]:
        """What a served repository or a benchmark result records about where it came from."""
        return {
            "spec": self.spec.name,
            "cell": self.cell.id,
            "engine_key": self.engine_key,
            "profile_id": self.profile_id,
        }

    @property
    def pending(self) -> str | None:
        """Why the keys cannot be computed yet (None when they can)."""
        return None if self.source is not None else f"checkpoint not found at {self.spec.local_source()}"

    def to_json(self) -> dict[str, Any]:
        """The cell's axes and identity."""
        return {
            "id": self.cell.id,
            **self.cell.axes(),
            "engine_key": self.engine_key,
            "profile_id": self.profile_id,
            "pending": self.pending,
        }


def for_cells(spec: EngineSpec, cells: list[Cell] | None = None) -> list[CellArtifacts]:
    """Artifacts of the given cells (default: every cell), with the source identity computed once."""
    source = source_identity(spec)
    return [CellArtifacts(c, source) for c in (cells if cells is not None else expand(spec))]


def for_cell(cell: Cell, source: SourceIdentity | None = None) -> CellArtifacts:
    """Artifacts of one cell; the source identity is computed here unless the caller already has it."""
    return CellArtifacts(cell, source if source is not None else source_identity(cell.spec))
