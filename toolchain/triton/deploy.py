"""Resolve what a cell's repository serves (registry engine, engine dir or the CPU reference) and emit it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.artifacts.cell import CellArtifacts
from toolchain.artifacts.layout import cache
from toolchain.errors import TritonRepoError
from toolchain.triton.emit import EngineInfo, emit_repository


def emit_for_cell(
    art: CellArtifacts, engine: str, out: Path, *, registry: str | None = None, force: bool = False
) -> dict[str, Any]:
    cell = art.cell
    identity = art.identity()
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
        from toolchain.registry import open_registry

        reg = open_registry(registry)
        k = reg.resolve(engine)
        path = cache().engine(k)
        if not (path / "config.json").is_file():
            reg.get(k, path, force=True)
        identity["engine_key"] = k
    info = EngineInfo.from_engine_dir(path)
    repo = emit_repository(cell, info, tok, out, identity=identity, reference=False, force=force)
    return {"repository": str(repo), "layout": "inflight_batcher_llm", "reference": False, **identity}
