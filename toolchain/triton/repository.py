"""Emit a cell's Triton repository for an engine directory (or LLM-API checkpoint), or for the CPU
reference model. Fetching from a registry happens before, in ``toolchain.pipeline.emit``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.artifacts.cell import CellArtifacts
from toolchain.digest import copy_tree
from toolchain.errors import TritonRepoError
from toolchain.outdir import check_output, owned_output
from toolchain.specs.slo import slo_targets
from toolchain.triton.emit import EngineInfo, emit_repository


def emit_for_cell(
    art: CellArtifacts,
    engine: str,
    out: Path,
    *,
    engine_key: str | None = None,
    force: bool = False,
    engines_root: str | None = None,
    draft_engine: str | None = None,
    reference_weights: tuple[Path, str] | None = None,
    standin: bool = False,
) -> dict[str, Any]:
    """Emit the repository of one cell (a draft-target cell's also serves ``draft_engine``, its draft's
    engine directory; with ``"reference"`` the draft checkpoint runs on the CPU reference model).

    ``engine``: an engine directory (runtime pytorch: the LLM-API artifact or a Hugging Face checkpoint
    directory), or ``"reference"`` (the CPU reference model; for pytorch: the spec's own checkpoint).
    ``engine_key`` names the engine when it is known (fetched from a registry) and differs from the key
    the cell's spec gives.
    ``engines_root``: None puts the engine (or the LLM-API checkpoint) inside the repository; an absolute
    path such as ``"/engines"`` makes the configs point at ``<engines_root>/<engine key>`` and copies
    nothing: the result's ``mounts`` say which local directory must appear at which path where the
    server runs (an image build copies it there, a pod mounts it).
    ``reference_weights``: the checkpoint the CPU reference model serves and what it is (the dequantized
    quantized export, from ``pipeline.emit``); the source checkpoint when not given.
    ``standin`` (runtime pytorch): the llmapi model is the toolchain's CPU stand-in for the LLM API, serving
    ``reference_weights`` (default: the source checkpoint); without it, ``"reference"`` on a pytorch spec is
    TensorRT-LLM's llmapi model over the spec's own checkpoint.
    """
    cell = art.cell
    identity = art.identity()
    if engine_key is not None:
        identity["engine_key"] = engine_key
    if cell.spec.runtime == "pytorch":
        weights: tuple[Path | None, str] | None = None
        if standin:
            weights = reference_weights or _reference_weights(art)
        return _emit_llmapi(art, engine, Path(out), identity, force, engines_root, weights)
    tok = art.tokenizer_dir()
    if engine == "reference":
        return _emit_reference(art, tok, out, identity, force, reference_weights)
    return _emit_engine_dir(art, engine, tok, out, identity, force, engines_root, draft_engine)


def _emit_reference(
    art: CellArtifacts,
    tok: Path,
    out: Path,
    identity: dict[str, Any],
    force: bool,
    reference_weights: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    """Emit the repository that serves the cell's checkpoint on the CPU reference model."""
    cell = art.cell
    info = EngineInfo.predicted(cell)
    src, served = reference_weights or _reference_weights(art)
    identity = {**identity, "reference_weights": served}
    repo = emit_repository(
        cell,
        info,
        tok,
        out,
        identity=identity,
        reference=True,
        reference_model_dir=src,
        force=force,
        draft_dir=_reference_draft(cell),
    )
    return _result(repo, "inflight_batcher_llm", True, identity)


def _reference_weights(art: CellArtifacts) -> tuple[Path | None, str]:
    """The source checkpoint, and what it is, when no dequantized export is given (``pipeline.emit`` gives one
    once the cell's quantized checkpoint exists)."""
    from toolchain.artifacts.recipe import is_unquantized

    src = art.cell.spec.local_source()
    if is_unquantized(art.cell.spec):
        return src, "source checkpoint (unquantized spec)"
    return src, "source checkpoint, NOT quantized (run `toolchain quantize SPEC` to serve the quantized export)"


def _emit_engine_dir(
    art: CellArtifacts,
    engine: str,
    tok: Path,
    out: Path,
    identity: dict[str, Any],
    force: bool,
    engines_root: str | None,
    draft_engine: str | None,
) -> dict[str, Any]:
    """Emit the repository that serves the engine directory ``engine``, refused when built for another cell."""
    cell = art.cell
    path = Path(engine)
    if not path.is_dir():
        raise TritonRepoError(f"engine {engine} is not a directory", "give an engine directory or a registry key")
    info = EngineInfo.from_engine_dir(path)
    wrong = info.mismatches(cell)
    if wrong:
        raise TritonRepoError(
            f"the engine in {path} was not built for cell {cell.id}: {'; '.join(wrong)}",
            f"build this cell (`toolchain build SPEC --cell {cell.id}`) or pass the --cell the engine was built for",
        )
    repo = emit_repository(
        cell,
        info,
        tok,
        out,
        identity=identity,
        reference=False,
        force=force,
        engines_root=engines_root,
        draft_dir=Path(draft_engine) if draft_engine else None,
    )
    return _result(repo, "inflight_batcher_llm", False, identity, str(path.resolve()))


def _reference_draft(cell: Any) -> Path | None:
    """The draft checkpoint a draft-target cell's CPU reference draft model runs (a local directory)."""
    sd = cell.spec.speculative
    if sd is None or sd.mode != "draft_target":
        return None
    from toolchain.specs.speculative_spec import draft_spec

    src = draft_spec(cell.spec).local_source()
    if src is None or not (src / "config.json").is_file():
        raise TritonRepoError(
            "the CPU reference draft model needs a local Hugging Face checkpoint",
            "point speculative.draft.source at a local directory",
        )
    return src


def _result(repo: Path, layout: str, reference: bool, identity: dict[str, Any], source: str = "") -> dict[str, Any]:
    """The emit result; ``mounts`` adds the local ``source`` the repository (which names no host path) leaves out."""
    meta = json.loads((repo / "toolchain-repo.json").read_text())
    return {
        "repository": str(repo),
        "layout": layout,
        "reference": reference,
        **identity,
        "mounts": [{"source": source, **m} for m in meta.get("mounts", [])],
    }


def _llmapi_model(art: CellArtifacts, engine: str) -> Path | str:
    """What model.yaml's ``model`` names: a local checkpoint directory, or a Hugging Face repo id."""
    from toolchain.artifacts.recipe import is_unquantized

    cell = art.cell
    if engine != "reference":
        path = Path(engine)
        return path / "hf" if (path / "hf" / "config.json").is_file() else path
    if is_unquantized(cell.spec):
        local = cell.spec.local_source()
        if local is not None:
            return local
        repo, rev = cell.spec.model.hf_repo_revision()
        return f"{repo}@{rev}" if rev else repo
    return art.quantized_dir / "hf"


def _carry_models(art: CellArtifacts, engine: str, dest: Path) -> None:
    """The draft model and LoRA adapters model.yaml names relative to the model (``draft/``,
    ``lora/<n>-<name>/``): from the built artifact where it carries them, else from the spec's sources
    (a pinned hf:// one downloaded at its revision). No path of this host is left in the repository."""
    from toolchain.artifacts.source import carried_dir
    from toolchain.specs.llmapi import bundled_models

    built = Path(engine) if engine != "reference" else None
    for rel, source in bundled_models(art.cell.spec).items():
        if built is not None and (built / rel).is_dir():
            copy_tree(built / rel, dest / rel)
        else:
            copy_tree(carried_dir(rel, source), dest / rel)


def _carry_bundle(artifact: Path | None, dest: Path) -> None:
    """The warm-start bundle's manifest and caches beside model.yaml, where the llmapi model checks them
    against its GPU and TensorRT-LLM before handing them to the runtime (toolchain.artifacts.bundle)."""
    from toolchain.artifacts.bundle import CACHES, MANIFEST

    if artifact is None or not (artifact / MANIFEST).is_file():
        return
    (dest / MANIFEST).write_bytes((artifact / MANIFEST).read_bytes())
    if (artifact / CACHES).is_dir():
        copy_tree(artifact / CACHES, dest / CACHES)


def _is_engine_config(path: Path) -> bool:
    """A TensorRT-LLM engine's config.json (``build_config`` and ``pretrained_config``), not a checkpoint's."""
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "build_config" in cfg and "pretrained_config" in cfg


def _emit_llmapi(
    art: CellArtifacts,
    engine: str,
    out: Path,
    identity: dict[str, Any],
    force: bool,
    engines_root: str | None,
    standin_weights: tuple[Path | None, str] | None = None,
) -> dict[str, Any]:
    """``standin_weights``: serve with the CPU stand-in for the LLM API, running these weights (and what they are)."""
    from toolchain.specs.llmapi import bundled_models
    from toolchain.triton.llmapi_repo import MODEL_REL, STANDIN_WEIGHTS, llmapi_files, model_source, standin_source

    out = check_output(out, force=force)
    if engines_root is not None and not engines_root.startswith("/"):
        raise TritonRepoError(
            f"engines root {engines_root!r} is not an absolute path",
            "give the directory the checkpoints are mounted at where the server runs, e.g. --engines-root /engines",
        )
    cell = art.cell
    model = _llmapi_model(art, engine)
    mounts: list[dict[str, str]] = []
    if isinstance(model, Path) and not (model / "config.json").is_file():
        raise TritonRepoError(
            f"no Hugging Face checkpoint at {model}",
            "run `toolchain quantize SPEC` (quantized specs) or `toolchain build SPEC --cell ID` first",
        )
    if isinstance(model, Path) and _is_engine_config(model / "config.json"):
        raise TritonRepoError(
            f"{model} holds a TensorRT engine, but spec {art.cell.spec.name} runs on the PyTorch runtime "
            "(the LLM API loads a Hugging Face checkpoint)",
            "emit from the cell's PyTorch-runtime artifact (`toolchain build SPEC --cell ID`), "
            "or set runtime: tensorrt",
        )
    if isinstance(model, str):
        name = model  # a hub id: the LLM API downloads it where it runs
    elif engines_root is not None:
        name = f"{engines_root.rstrip('/')}/{identity.get('engine_key') or model.name}"
        mounts.append({"source": str(model), "target": name, "what": "checkpoint"})
    else:
        name = MODEL_REL
    with owned_output(out, command="triton emit", force=force) as tmp:
        hub_id, _, revision = name.partition("@") if isinstance(model, str) else (name, "", "")
        standin = standin_weights is not None
        for rel, text in llmapi_files(cell, hub_id, revision or None, standin=standin).items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        source = standin_source() if standin else model_source()
        (tmp / "tensorrt_llm" / "1" / "model.py").write_bytes(source.read_bytes())
        if standin_weights is not None:
            weights, served = standin_weights
            if weights is None or not (weights / "config.json").is_file():
                raise TritonRepoError(
                    f"the CPU stand-in has no checkpoint to run at {weights}",
                    "run `toolchain quantize SPEC` (or `toolchain up SPEC`) first",
                )
            copy_tree(weights, tmp / "tensorrt_llm" / "1" / STANDIN_WEIGHTS)
            identity = {**identity, "reference_weights": served}
        if isinstance(model, Path) and engines_root is None:
            copy_tree(model, tmp / "tensorrt_llm" / "1" / Path(MODEL_REL).name)
        _carry_bundle(Path(engine) if engine != "reference" else None, tmp / "tensorrt_llm" / "1")
        _carry_models(art, engine, tmp / "tensorrt_llm" / "1")
        inside = [{k: v for k, v in m.items() if k != "source"} for m in mounts]  # no host path inside
        carried = sorted(bundled_models(cell.spec))  # directories beside model.yaml that it names
        meta = {**identity, "layout": "llmapi", "engines_root": engines_root, "mounts": inside, "carried": carried}
        if standin:
            meta["stand_in"] = "CPU stand-in for TensorRT-LLM's LLM API (PyTorch + transformers), not TensorRT-LLM"
        meta["slo"] = slo_targets(cell.spec)  # `bench --repo` measures against them without the spec
        (tmp / "toolchain-repo.json").write_text(json.dumps(meta, indent=2))
    return _result(out, "llmapi", standin, identity, str(model) if mounts else "")
