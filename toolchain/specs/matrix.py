"""Matrix expansion: the cells (GPU x batch x sequence x input length x TP) of a spec.

The keys that name a cell's artifacts (engine key, profile id) are in ``toolchain.artifacts.keys``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from toolchain.errors import SpecError
from toolchain.hardware.catalog import GPU, lookup_gpu
from toolchain.specs.models import EngineSpec


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
