"""Resolve what a cell's repository serves (registry engine, engine dir or the CPU reference) and emit it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.digest import cache_home
from toolchain.errors import TritonRepoError
from toolchain.specs.matrix import Cell, checkpoint_identity, engine_key, profile_id
from toolchain.triton.emit import EngineInfo, emit_repository


def tokenizer_dir(cell: Cell) -> Path:
    from toolchain.compile.engine import quantized_checkpoint

    q = quantized_checkpoint(cell) / "trtllm"
    if (q / "tokenizer.json").is_file():
        return q
    local = cell.spec.local_source()
    if local is not None and (local / "tokenizer.json").is_file():
        return local
    raise TritonRepoError(
        f"no tokenizer for cell {cell.id} (looked in {q} and the model source)",
        "run `toolchain quantize SPEC`, or point model.source at a checkpoint with tokenizer files",
    )


def emit_for_cell(
    cell: Cell, engine: str, out: Path, *, registry: str | None = None, force: bool = False
) -> dict[str, Any]:
    ident = checkpoint_identity(cell.spec)
    key = engine_key(cell, ident) if ident else None
    identity = {
        "spec": cell.spec.name,
        "cell": cell.id,
        "engine_key": key,
        "profile_id": profile_id(cell, key) if key else None,
    }
    if cell.spec.runtime == "pytorch":
        from toolchain.compile.engine import quantized_checkpoint
        from toolchain.triton.llmapi_repo import llmapi_files

        out = Path(out)
        if out.exists() and any(out.iterdir()) and not force:
            from toolchain.errors import OutputExistsError

            raise OutputExistsError(f"{out} is not empty")
        for rel, text in llmapi_files(cell, quantized_checkpoint(cell) / "hf").items():
            p = out / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        (out / "toolchain-repo.json").write_text(json.dumps({**identity, "layout": "llmapi"}, indent=2))
        return {"repository": str(out), "layout": "llmapi", "reference": False, **identity}
    tok = tokenizer_dir(cell)
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
        path = cache_home() / "engines" / k
        if not (path / "config.json").is_file():
            reg.get(k, path, force=True)
        identity["engine_key"] = k
    info = EngineInfo.from_engine_dir(path)
    repo = emit_repository(cell, info, tok, out, identity=identity, reference=False, force=force)
    return {"repository": str(repo), "layout": "inflight_batcher_llm", "reference": False, **identity}
