"""Draft-target builds two engines: the draft model's (a plain engine of the draft checkpoint, keyed on
its own) and the target's (built with ``--speculative_decoding_mode draft_tokens_external``). Both go to
the registry; the target's provenance names its draft's key, and each says which role it plays."""

from __future__ import annotations

from toolchain.artifacts.cell import CellArtifacts, for_cell
from toolchain.artifacts.store import ArtifactStore
from toolchain.compile.engine import CellBuild, build_cell, plan_cell_build
from toolchain.progress import Progress, silent
from toolchain.specs.speculative_spec import draft_cell


def draft_artifacts(art: CellArtifacts) -> CellArtifacts | None:
    """The draft engine's artifacts of a draft-target cell (None for any other cell)."""
    sd = art.spec.speculative
    if sd is None or sd.mode != "draft_target" or art.spec.runtime != "tensorrt":
        return None
    return for_cell(draft_cell(art.cell))


def builds_for(
    art: CellArtifacts,
    registry: ArtifactStore,
    *,
    dry_run: bool = False,
    force: bool = False,
    timeout: float | None = None,
    progress: Progress = silent,
    held: set[str] | None = None,
    rehash: bool = False,
) -> list[CellBuild]:
    """Plan or build every engine a cell needs: the draft first (draft-target), then the cell's own.
    ``held``: the cell engine keys the registry holds, asked once for many cells (``Registry.existing``)."""
    out: list[CellBuild] = []
    extra: dict[str, object] = {}
    d = draft_artifacts(art)
    if d is not None:
        r = (
            plan_cell_build(d, registry, force=force)
            if dry_run
            else build_cell(
                d,
                registry,
                force=force,
                timeout=timeout,
                progress=progress,
                provenance_extra={"role": "draft"},
                rehash=rehash,
            )
        )
        r.notes.append(f"draft engine of {art.cell.id} ({d.spec.model.source})")
        out.append(r)
        extra = {"role": "target", "draft_engine_key": r.key}
    t = (
        plan_cell_build(art, registry, force=force, held=held)
        if dry_run
        else build_cell(
            art,
            registry,
            force=force,
            timeout=timeout,
            progress=progress,
            provenance_extra=extra or None,
            held=held,
            rehash=rehash,
        )
    )
    if d is not None:
        t.notes.append(f"draft engine key {out[0].key}")
    out.append(t)
    return out
