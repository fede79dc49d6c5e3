"""``serving.cuda_graphs`` on each runtime: what the spec's knobs become, and what a runtime cannot do.

Facts (docs/triton-backend.md "CUDA graphs"):

- ``tensorrt`` (the C++ ``tensorrtllm`` backend, TensorRT-LLM 1.1): the backend reads only ``cuda_graph_mode``
  and ``cuda_graph_cache_size`` into the executor's ``ExtendedRuntimePerfKnobConfig``. The runtime captures a
  graph for each generation-only batch it runs (keyed by the batch's state, i.e. its composition) and keeps
  the most recently used ``min(engine max_batch_size, max(cuda_graph_cache_size, 1))`` of them per runtime
  buffer (``trtGptModelInflightBatching.cpp``). It cannot be told which batch sizes to capture and never
  pads a batch to a captured size.
- ``pytorch`` (the LLM API): ``cuda_graph_config`` takes ``batch_sizes``, ``max_batch_size`` and
  ``enable_padding``; there is no cache size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.specs.base import Problem

if TYPE_CHECKING:
    from toolchain.specs.matrix import Cell
    from toolchain.specs.models import EngineSpec


def default_batch_sizes(max_batch_size: int) -> list[int]:
    """Powers of 2 below the max batch size, and the max batch size: the spec's default."""
    out, b = [], 1
    while b < max_batch_size:
        out.append(b)
        b *= 2
    out.append(max_batch_size)
    return out


def batch_sizes(cell: Cell) -> list[int]:
    """The decode batch sizes the cell's graphs are for (empty when CUDA graphs are off)."""
    cg = cell.spec.serving.cuda_graphs
    if not cg.enabled:
        return []
    return sorted(cg.batch_sizes) if cg.batch_sizes else default_batch_sizes(cell.max_batch_size)


def tensorrt_cache_size(cell: Cell) -> int:
    """``cuda_graph_cache_size`` for the tensorrtllm backend: the graphs to keep, one per decode batch size the
    spec asks for (its ``batch_sizes``, or powers of 2 up to the max batch), unless ``cache_size`` says how many."""
    cg = cell.spec.serving.cuda_graphs
    if not cg.enabled:
        return 0
    return cg.cache_size or len(batch_sizes(cell))


def problems(spec: EngineSpec) -> list[Problem]:
    """What a runtime cannot do with the spec's cuda_graphs block (said up front by `spec validate`)."""

    cg = spec.serving.cuda_graphs
    out: list[Problem] = []
    if not cg.enabled:
        return out
    if spec.runtime == "tensorrt" and cg.padding and "padding" in cg.model_fields_set:
        out.append(
            Problem(
                None,
                "serving.cuda_graphs.padding: the tensorrtllm backend cannot pad a batch to a captured size (it "
                "reads only cuda_graph_mode and cuda_graph_cache_size, and captures each decode batch as it occurs)",
                "remove padding (or set it to false) for runtime tensorrt; padding needs runtime: pytorch",
            )
        )
    if spec.runtime == "pytorch" and cg.cache_size:
        out.append(
            Problem(
                None,
                "serving.cuda_graphs.cache_size is the tensorrtllm backend's; the LLM API captures exactly "
                "batch_sizes and has no graph cache size",
                "remove cache_size for runtime pytorch (list the sizes in batch_sizes)",
            )
        )
    return out


def cell_problems(cell: Cell) -> list[Problem]:

    cg = cell.spec.serving.cuda_graphs
    if cell.spec.runtime == "tensorrt" and cg.enabled and cg.cache_size and cg.cache_size > cell.max_batch_size:
        return [
            Problem(
                cell.id,
                f"serving.cuda_graphs.cache_size {cg.cache_size} exceeds the engine max batch {cell.max_batch_size}: "
                f"the runtime keeps at most {cell.max_batch_size} graphs",
                f"set cache_size <= {cell.max_batch_size} (the smallest matrix.max_batch_size)",
            )
        ]
    return []


def notes(spec: EngineSpec, cells: list[Cell]) -> list[str]:
    """What the tensorrt runtime makes of a chosen ``batch_sizes`` list (accepted: it keeps that many graphs,
    not those sizes); nothing when the list is the default one (powers of 2 up to each cell's max batch)."""
    cg = spec.serving.cuda_graphs
    if spec.runtime != "tensorrt" or not cg.enabled or not cg.batch_sizes or cg.cache_size:
        return []
    if all(sorted(cg.batch_sizes) == default_batch_sizes(c.max_batch_size) for c in cells):
        return []
    n = len(cg.batch_sizes)
    return [
        f"serving.cuda_graphs.batch_sizes on runtime tensorrt: the tensorrtllm backend cannot be told which sizes "
        f"to capture; it captures each decode batch as it occurs and keeps the {n} most recently used graphs "
        f"(cuda_graph_cache_size {n}); exact sizes need runtime: pytorch"
    ]
