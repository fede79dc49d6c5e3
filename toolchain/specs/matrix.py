"""Matrix expansion, engine keys and profile ids.

Engine key = sha256 over the canonical JSON of everything that changes the built bytes: the
checkpoint identity (content digest of a local checkpoint, or repo@revision of an hf:// one)
together with the quantization recipe that turns it into the quantized checkpoint, the runtime,
TensorRT-LLM and TensorRT versions, the GPU (full NVML name and compute capability), TP/PP and
every spec field declared ``build`` in ``toolchain.specs.fields``.

Profile id = sha256 over the engine key plus every ``runtime`` field. Changing a runtime knob
makes a new profile and never a rebuild.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.digest import canonical_json, dir_digest, sha256_text
from toolchain.errors import SpecError
from toolchain.hardware.catalog import GPU, lookup_gpu
from toolchain.specs.fields import values_in_scope
from toolchain.specs.models import EngineSpec

KEY_SCHEMA = 1
# The quantizer whose output the key stands for (pinned in pyproject's [quantize] extra).
QUANTIZER = "nvidia-modelopt==0.47.0"


@dataclass(frozen=True)
class Cell:
    spec: EngineSpec
    gpu: GPU
    max_batch_size: int
    max_seq_len: int
    max_input_len: int
    tp: int
    pp: int

    @property
    def id(self) -> str:
        pp = f"-pp{self.pp}" if self.pp > 1 else ""
        return (
            f"{self.gpu.name.lower()}-b{self.max_batch_size}-s{self.max_seq_len}-i{self.max_input_len}-tp{self.tp}{pp}"
        )

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def axes(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.name,
            "max_batch_size": self.max_batch_size,
            "max_seq_len": self.max_seq_len,
            "max_input_len": self.max_input_len,
            "tp": self.tp,
            "pp": self.pp,
        }


def expand(spec: EngineSpec) -> list[Cell]:
    """Every matrix cell, in a stable order (gpu, batch, seq, input, tp)."""
    m = spec.matrix
    gpus = [lookup_gpu(g) for g in m.gpu]
    tps = m.tp or [spec.parallelism.tp]
    cells: list[Cell] = []
    for gpu, bs, seq, tp in itertools.product(gpus, m.max_batch_size, m.max_seq_len, tps):
        inputs = m.max_input_len or [max(1, seq // 2)]
        for inp in inputs:
            cells.append(Cell(spec, gpu, bs, seq, inp, tp, spec.parallelism.pp))
    return cells


def find_cell(spec: EngineSpec, cell_id: str) -> Cell:
    cells = expand(spec)
    for c in cells:
        if c.id == cell_id:
            return c
    raise SpecError(
        f"no cell '{cell_id}' in spec '{spec.name}'",
        hint="run `toolchain spec expand SPEC` to list cell ids; known: "
        + ", ".join(c.id for c in cells[:6])
        + (" ..." if len(cells) > 6 else ""),
    )


def checkpoint_identity(spec: EngineSpec) -> dict[str, Any] | None:
    """What the input checkpoint is: its content digest, or repo@revision; None if it is not there yet."""
    if spec.model.is_hf:
        repo, rev = spec.model.hf_repo_revision()
        return {"hf": repo, "revision": rev or "main"}
    path = spec.local_source()
    assert path is not None
    if not (path / "config.json").is_file():
        return None
    return {"digest": dir_digest(path)}


def key_material(cell: Cell, checkpoint: dict[str, Any]) -> dict[str, Any]:
    spec = cell.spec
    # the draft model of draft-target is its own engine with its own key (toolchain.specs.speculative)
    build = values_in_scope(spec, "build", skip=("matrix.", "parallelism.", "model.source", "speculative.draft."))
    material: dict[str, Any] = {
        "schema": KEY_SCHEMA,
        "checkpoint": checkpoint,
        "quantizer": QUANTIZER
        if spec.quantization.weights not in ("bf16", "fp16") or spec.quantization.kv_cache != "auto"
        else None,
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
    return material


def heads_identity(spec: EngineSpec) -> dict[str, Any] | None:
    """Content digest of a local Medusa/EAGLE heads checkpoint (converted into the engine's weights)."""
    sd = spec.speculative
    if sd is None or sd.heads is None or sd.heads.source.startswith("hf://"):
        return None
    p = Path(sd.heads.source).expanduser()
    p = p if p.is_absolute() else (spec.base_dir / p).resolve()
    return {"digest": dir_digest(p)} if p.is_dir() else None


def engine_key(cell: Cell, checkpoint: dict[str, Any]) -> str:
    return sha256_text(canonical_json(key_material(cell, checkpoint)))


def profile_id(cell: Cell, key: str) -> str:
    runtime = values_in_scope(cell.spec, "runtime")
    return sha256_text(canonical_json({"schema": KEY_SCHEMA, "engine_key": key, "runtime": runtime}))


@dataclass(frozen=True)
class CellIdentity:
    cell: Cell
    engine_key: str | None
    profile_id: str | None
    pending: str | None  # why the key cannot be computed yet

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.cell.id,
            **self.cell.axes(),
            "engine_key": self.engine_key,
            "profile_id": self.profile_id,
            "pending": self.pending,
        }


def identities(spec: EngineSpec) -> list[CellIdentity]:
    ckpt = checkpoint_identity(spec)
    out = []
    for cell in expand(spec):
        if ckpt is None:
            out.append(CellIdentity(cell, None, None, f"checkpoint not found at {spec.local_source()}"))
            continue
        key = engine_key(cell, ckpt)
        out.append(CellIdentity(cell, key, profile_id(cell, key), None))
    return out
