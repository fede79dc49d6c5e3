"""`toolchain job`: what one pod of a build farm Job does (docs/cluster-builds.md).

The pod's index (Kubernetes' ``JOB_COMPLETION_INDEX`` in an Indexed Job, or Argo's ``--index``) picks one
entry of the index file `toolchain matrix --format kubernetes|argo` wrote (``build.json`` / ``quantize.json``,
mounted from a ConfigMap, the spec files beside them). The pod does exactly that entry against the shared
registry and nothing else:

- ``quantize``: the quantize group's checkpoint (one TP/PP mapping of one spec), stored under its
  quantized-checkpoint key; skipped when the registry holds it.
- ``build``: the cell's engine (or LLM-API profile); skipped when the registry holds it. When its quantized
  checkpoint is not in the registry yet (the quantize Job runs beside it), it waits for it, polling, a line of
  progress per poll, at most ``wait_s`` seconds.
- ``tag``: every engine of the index file tagged ``<tag>-<cell job id>`` (Argo's final step), after checking
  all of them are there.

An index outside the file, a missing index, or a cell whose engine key here differs from the one the matrix
computed (another TensorRT-LLM in the image, a spec changed since) is a user error: exit 2, which the Jobs'
``podFailurePolicy`` fails at once instead of retrying.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain import settings
from toolchain.artifacts.cell import for_cells
from toolchain.artifacts.keys import quantize_job_id
from toolchain.compile.draft import builds_for
from toolchain.errors import RegistryUnavailableError, ToolchainError, UserInputError
from toolchain.pipeline.quantize import run_quantize, spec_jobs
from toolchain.progress import Progress, silent
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import find_cell

KINDS = ("build", "quantize")
DEFAULT_POLL_S = 30.0


@dataclass(frozen=True)
class IndexEntry:
    index: int
    total: int
    entry: dict[str, Any]
    spec_path: Path


def resolve_index(index: int | None) -> int:
    """``index`` when given, else the pod's ``JOB_COMPLETION_INDEX``."""
    if index is not None:
        return index
    raw = settings.job_completion_index()
    if raw is None:
        raise UserInputError(
            "no index: JOB_COMPLETION_INDEX is not set (this is not a pod of an Indexed Job)",
            "pass --index N, or run it in a Job with completionMode: Indexed",
        )
    try:
        value = int(raw)
    except ValueError as e:
        raise UserInputError(f"JOB_COMPLETION_INDEX={raw!r} is not an integer", "pass --index N") from e
    return value


def load_entry(cells: Path, index: int | None) -> IndexEntry:
    """The entry of the index file this pod does."""
    i = resolve_index(index)
    try:
        entries = json.loads(cells.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserInputError(
            f"cannot read the index file {cells}: {e.strerror or e}",
            "give the build.json or quantize.json `toolchain matrix --format kubernetes` wrote",
        ) from e
    except ValueError as e:
        raise UserInputError(f"{cells} is not JSON: {e}", "write it again with `toolchain matrix`") from e
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "spec" in e for e in entries):
        raise UserInputError(f"{cells} is not an index file", "write it again with `toolchain matrix`")
    if not 0 <= i < len(entries):
        raise UserInputError(
            f"index {i} is not in {cells} (it holds {len(entries)} entries: 0..{len(entries) - 1})",
            "the Job's completions must match its index file; write both again with `toolchain matrix`",
        )
    entry = entries[i]
    spec = Path(entry["spec"])
    if spec.is_absolute() or ".." in spec.parts:
        raise UserInputError(f"{cells}: entry {i} names the spec {spec} outside its directory")
    return IndexEntry(i, len(entries), entry, cells.parent / spec)


def wait_for(
    registry: Any, key: str, *, wait_s: float, poll_s: float = DEFAULT_POLL_S, progress: Progress = silent
) -> bool:
    """Poll ``registry`` until it holds ``key``, at most ``wait_s`` seconds; True once it does."""
    t0 = time.monotonic()
    while True:
        try:
            if registry.exists(key):
                return True
        except RegistryUnavailableError as e:  # a registry blip while waiting is one more poll
            progress("waiting for the quantized checkpoint", message=f"registry unavailable: {e.message}")
        waited = time.monotonic() - t0
        if waited >= wait_s:
            return False
        progress("waiting for the quantized checkpoint", waited, wait_s, unit="s", message=key[:16])
        time.sleep(min(poll_s, max(0.0, wait_s - waited)))


def run_build(
    cells: Path,
    *,
    index: int | None = None,
    registry: str | None = None,
    timeout: float | None = None,
    wait_s: float = 0.0,
    poll_s: float = DEFAULT_POLL_S,
    progress: Progress = silent,
) -> dict[str, Any]:
    """Build the cell of this pod's index; ``status`` is ``cached`` when the registry already held it."""
    e = load_entry(cells, index)
    spec = load_spec(e.spec_path)
    cell_id = e.entry.get("cell")
    if not isinstance(cell_id, str):
        raise UserInputError(f"{cells}: entry {e.index} names no cell", "write it again with `toolchain matrix`")
    art = for_cells(spec, [find_cell(spec, cell_id)])[0]
    _same_key("engine", e, art.engine_key, e.entry.get("engine_key"))
    reg = open_registry(registry)
    out: dict[str, Any] = {
        "index": e.index,
        "of": e.total,
        "id": e.entry.get("id"),
        "cell": cell_id,
        "engine_key": art.engine_key,
        "registry": reg.url,
    }
    qkey = e.entry.get("quantized_key")
    if qkey and not reg.exists(art.engine_key or ""):
        _same_key("quantized-checkpoint", e, art.quantized_key, qkey)
        if not wait_for(reg, qkey, wait_s=wait_s, poll_s=poll_s, progress=progress):
            raise ToolchainError(
                f"the quantized checkpoint {qkey[:16]} of cell {cell_id} is not in {reg.url} after {wait_s:g} s",
                f"check the quantize Job's index for group {quantize_job_id(qkey)} (kubectl logs), then re-run",
            )
    rs = builds_for(art, reg, timeout=timeout, progress=progress)
    out["status"] = rs[-1].status
    out["engines"] = [r.to_json() for r in rs]
    return out


def run_quantize_index(
    cells: Path,
    *,
    index: int | None = None,
    registry: str | None = None,
    device: str = "cuda",
    progress: Progress = silent,
) -> dict[str, Any]:
    """Quantize the group of this pod's index into the registry; ``status`` ``cached`` when it was there."""
    e = load_entry(cells, index)
    qkey = e.entry.get("quantized_key")
    jobs = [j for j in spec_jobs(e.spec_path) if j.registry_key == qkey]
    if not jobs:
        raise UserInputError(
            f"{e.spec_path} has no quantize group with key {str(qkey)[:16]} (entry {e.index} of {cells})",
            "the spec or the image's versions changed since the matrix was written: write it again",
        )
    reg = open_registry(registry)
    out: dict[str, Any] = {"index": e.index, "of": e.total, "id": e.entry.get("id"), "quantized_key": qkey}
    out["registry"] = reg.url
    if reg.exists(jobs[0].registry_key or ""):
        out["status"] = "cached"
        return out
    outcome = run_quantize(jobs[0], device=device, registry=reg.url, progress=progress)[0]
    out["status"] = "reused" if outcome.result.reused else "quantized"
    out["stored_as"] = outcome.stored_as
    return out


def tag_set(cells: Path, tag: str, *, registry: str | None = None) -> dict[str, Any]:
    """Tag every engine of a build index file ``<tag>-<cell job id>``, once all of them are in the registry."""
    try:
        entries = json.loads(cells.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserInputError(f"cannot read the index file {cells}: {e}", "give the build.json it wrote") from e
    reg = open_registry(registry)
    keys = {x["id"]: x["engine_key"] for x in entries}
    missing = sorted(i for i, k in keys.items() if not reg.exists(k))
    if missing:
        raise ToolchainError(
            f"{len(missing)} of {len(keys)} engines are not in {reg.url} (first: {missing[0]})",
            "the set is tagged only when every cell is built: look at the failed build steps",
        )
    tags = {}
    for job_id, key in keys.items():
        name = f"{tag}-{job_id}"
        reg.tag(key, name)
        tags[name] = key
    return {"registry": reg.url, "tags": tags}


def _same_key(what: str, e: IndexEntry, here: str | None, written: Any) -> None:
    if written is not None and here != written:
        raise UserInputError(
            f"entry {e.index}: the {what} key here is {str(here)[:16]}, the matrix wrote {str(written)[:16]} "
            f"(another TensorRT-LLM in the image, or {e.spec_path.name} changed)",
            "write the Jobs again with `toolchain matrix --format kubernetes` for this image and these specs",
        )
