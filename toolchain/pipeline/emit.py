"""`toolchain triton emit`: resolve the engine a cell serves (registry key or tag, directory, or the CPU
reference), fetch it from the registry when needed, then emit the cell's Triton repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.artifacts.cell import CellArtifacts
from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import is_unquantized
from toolchain.errors import TritonRepoError
from toolchain.registry import open_registry
from toolchain.triton.repository import emit_for_cell


def fetch_engine(ref: str, registry: str | None) -> tuple[Path, str]:
    """A registry key, key prefix or tag -> the engine restored under the cache, and its full key."""
    reg = open_registry(registry)
    key = reg.resolve(ref)
    path = cache().engine(key)
    if not (path / "config.json").is_file() and not (path / "hf" / "config.json").is_file():  # engine / LLM-API
        reg.get(key, path, force=True)
    return path, key


def emit_cell(
    art: CellArtifacts,
    engine: str,
    out: Path,
    *,
    registry: str | None = None,
    force: bool = False,
    engines_root: str | None = None,
    standin: bool = False,
) -> dict[str, Any]:
    """Emit ``art``'s repository for ``engine``: ``reference``, an engine directory, or a registry reference.
    ``engines_root``: see ``toolchain.triton.repository.emit_for_cell``. ``standin`` (runtime pytorch): the
    CPU stand-in for the LLM API serves the artifact's checkpoint (the quantized export, dequantized)."""
    if standin and engine != "reference":
        served = dequantized_export(art) or _source_weights(art)
        path, key = (Path(engine), None) if Path(engine).is_dir() else fetch_engine(engine, registry)
        return emit_for_cell(
            art, str(path), out, engine_key=key, force=force, engines_root=engines_root,
            reference_weights=served, standin=True,
        )  # fmt: skip
    if engine == "reference":
        weights = dequantized_export(art)
        if standin and weights is None and art.spec.runtime == "pytorch":
            weights = _source_weights(art) if is_unquantized(art.spec) else None
        return emit_for_cell(
            art, engine, out, force=force, engines_root=engines_root, reference_weights=weights, standin=standin
        )
    draft = _draft_engine(art, registry)
    if Path(engine).is_dir():
        return emit_for_cell(art, engine, out, force=force, engines_root=engines_root, draft_engine=draft)
    path, key = fetch_engine(engine, registry)
    return emit_for_cell(
        art, str(path), out, engine_key=key, force=force, engines_root=engines_root, draft_engine=draft
    )


def dequantized_export(art: CellArtifacts) -> tuple[Path, str] | None:
    """The cell's quantized export dequantized to float32, with the scales of its runtime numerics, for the CPU
    stand-ins (the reference model, the LLM-API stand-in), and what it is; None
    when the spec is unquantized or its quantized checkpoint is not made yet (the source is served then)."""
    from toolchain.artifacts.recipe import is_unquantized
    from toolchain.quantize.dequant import dequantized_checkpoint
    from toolchain.quantize.runtime import NUMERICS, NUMERICS_DIR

    export, manifest = art.quantized_dir / "hf", art.quantized_dir / "manifest.json"
    if is_unquantized(art.spec) or not (export / "config.json").is_file() or not manifest.is_file():
        return None
    digest = json.loads(manifest.read_text()).get("output_digest")
    dest = art.quantized_dir.with_name(art.quantized_dir.name + "-dequantized")
    w = art.spec.quantization.weights
    served = dequantized_checkpoint(export, dest, source_digest=digest)
    numerics = f", with its {NUMERICS}" if (served / NUMERICS_DIR).is_dir() else ""  # said only when carried
    return served, f"quantized export ({w}) dequantized to float32{numerics}"


def _source_weights(art: CellArtifacts) -> tuple[Path, str]:
    """An unquantized spec's stand-in weights: its own checkpoint."""
    src = art.spec.local_source()
    if src is None:
        raise TritonRepoError(
            f"the CPU stand-in needs a local checkpoint; spec {art.spec.name} names {art.spec.model.source}",
            "point model.source at a local directory to serve it here",
        )
    return src, "source checkpoint (unquantized spec)"


def _draft_engine(art: CellArtifacts, registry: str | None) -> str | None:
    """A draft-target cell's draft engine, fetched from the registry by its own key."""
    sd = art.spec.speculative
    if sd is None or sd.mode != "draft_target" or art.spec.runtime != "tensorrt":
        return None
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.speculative_spec import draft_cell

    key = for_cell(draft_cell(art.cell)).engine_key
    if key is None:
        return None  # emit then names what is missing
    return str(fetch_engine(key, registry)[0])
