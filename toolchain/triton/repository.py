"""Emit a cell's Triton repository for an engine directory, or for the CPU reference model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.artifacts.cell import CellArtifacts
from toolchain.errors import TritonRepoError
from toolchain.triton.emit import EngineInfo, emit_repository


def emit_for_cell(
    art: CellArtifacts, engine: str, out: Path, *, engine_key: str | None = None, force: bool = False
) -> dict[str, Any]:
    """``engine`` is an engine directory or ``reference``; ``engine_key`` names the engine when it is known
    (fetched from a registry) and differs from the key the cell's spec gives."""
    cell = art.cell
    identity = art.identity()
    if engine_key is not None:
        identity["engine_key"] = engine_key
    if cell.spec.runtime == "pytorch":
        from toolchain.triton.llmapi_repo import llmapi_files

        out = Path(out)
        if out.exists() and any(out.iterdir()) and not force:
            from toolchain.errors import OutputExistsError

            raise OutputExistsError(f"{out} is not empty")
        for rel, text in llmapi_files(cell, art.quantized_dir / "hf").items():
            p = out / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        (out / "toolchain-repo.json").write_text(json.dumps({**identity, "layout": "llmapi"}, indent=2))
        return {"repository": str(out), "layout": "llmapi", "reference": False, **identity}
    tok = art.tokenizer_dir()
    if engine == "reference":
        info = EngineInfo.predicted(cell)
        src = cell.spec.local_source()
        if src is None or not (src / "config.json").is_file():
            raise TritonRepoError(
                "the CPU reference model needs a local Hugging Face checkpoint",
                "point model.source at a local directory",
            )
        repo = emit_repository(
            cell, info, tok, out, identity=identity, reference=True, reference_model_dir=src, force=force
        )
        return {"repository": str(repo), "layout": "inflight_batcher_llm", "reference": True, **identity}
    path = Path(engine)
    if not path.is_dir():
        raise TritonRepoError(f"engine {engine} is not a directory", "give an engine directory or a registry key")
    info = EngineInfo.from_engine_dir(path)
    repo = emit_repository(cell, info, tok, out, identity=identity, reference=False, force=force)
    return {"repository": str(repo), "layout": "inflight_batcher_llm", "reference": False, **identity}
