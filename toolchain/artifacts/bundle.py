"""The PyTorch runtime's warm-start bundle: what one cell's LLM-API server needs to start, and the
GPU-specific state its start-up would otherwise redo (docs/bundles.md).

A bundle is a registry entry (kind ``llmapi-bundle``) keyed like an engine (GPU × TensorRT-LLM version ×
shape, ``toolchain.artifacts.keys``)::

    hf/                          the quantized unified checkpoint (or the source, unquantized)
    extra_llm_api_options.yaml   the LLM-API options of the cell
    bundle.json                  this module's manifest: state, what it was made for, its caches
    caches/                      warm bundles only: filled by a warm-up run on the target GPU
      autotuner.cache            TLLM_AUTOTUNER_CACHE_PATH (TensorRT-LLM's autotuner profiles)
      inductor/                  TORCHINDUCTOR_CACHE_DIR (torch.compile's compiled kernels)
      triton/                    TRITON_CACHE_DIR (Triton-language JIT kernels)

``toolchain build`` on a GPU host with TensorRT-LLM makes a **warm** bundle: it starts the LLM API once
with the cell's shapes and the cache variables pointing into ``caches/``. Anywhere else it makes a **cold**
bundle (checkpoint and options, no caches), named cold in every output. CUDA graphs are captured at every
start and cannot be kept (TensorRT-LLM has no graph cache); what is kept shortens the autotuning and
compilation around them.

**Checked on load.** TensorRT-LLM records the version and GPU in its autotuner file but does not check
them on load. Every consumer checks ``bundle.json`` against the GPU it runs on, the TensorRT-LLM it
has and the cell it serves (``accept``): a bundle made for anything else never reaches the runtime; the
server starts cold, with one warning.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.specs.matrix import Cell

KIND = "llmapi-bundle"
LEGACY_KIND = "llmapi-profile"  # entries published before bundles: checkpoint + options, always cold
MANIFEST = "bundle.json"
CACHES = "caches"
SCHEMA = 1
# environment variable -> path inside the bundle (source: docs/bundles.md)
CACHE_ENV = {
    "TLLM_AUTOTUNER_CACHE_PATH": f"{CACHES}/autotuner.cache",
    "TORCHINDUCTOR_CACHE_DIR": f"{CACHES}/inductor",
    "TRITON_CACHE_DIR": f"{CACHES}/triton",
}


@dataclass(frozen=True)
class MadeFor:
    """What a bundle's caches are valid for."""

    gpu: str  # NVML name, e.g. "NVIDIA H100 80GB HBM3"
    trtllm_version: str
    shape: dict[str, int]  # max_batch_size, max_seq_len, max_input_len, max_num_tokens, tp, pp

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "trtllm_version": self.trtllm_version, "shape": self.shape}

    def tp_pp(self) -> str:
        return f"{self.shape['tp']}, PP {self.shape['pp']}"


def made_for(cell: Cell) -> MadeFor:
    from toolchain.specs.llmapi import llmapi_options

    opts = llmapi_options(cell)
    shape = {
        "max_batch_size": cell.max_batch_size,
        "max_seq_len": cell.max_seq_len,
        "max_input_len": cell.max_input_len,
        "max_num_tokens": int(opts["max_num_tokens"]),
        "tp": cell.tp,
        "pp": cell.pp,
    }
    return MadeFor(cell.gpu.nvml_name, cell.spec.target.trtllm_version, shape)


def manifest(
    cell: Cell, *, warm: bool, caches: list[str] | None = None, seconds: float | None = None
) -> dict[str, Any]:
    """The bundle's ``bundle.json``: cold (no caches) or warm (the cache files a warm-up wrote)."""
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "state": "warm" if warm else "cold",
        "made_for": made_for(cell).to_json(),
        "caches": sorted(caches or []),
        "env": CACHE_ENV if warm else {},
        "warmup_seconds": seconds,
    }


def read_manifest(bundle: Path) -> dict[str, Any] | None:
    """A bundle's manifest; None for a legacy ``llmapi-profile`` entry (no manifest: cold)."""
    p = bundle / MANIFEST
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def mismatches(m: dict[str, Any], want: MadeFor) -> list[str]:
    """How a bundle's ``made_for`` differs from where it is loaded (empty: it fits)."""
    got = m.get("made_for") or {}
    out = []
    if got.get("gpu") != want.gpu:
        out.append(f"made on {got.get('gpu')}, this GPU is {want.gpu}")
    if got.get("trtllm_version") != want.trtllm_version:
        out.append(f"made with TensorRT-LLM {got.get('trtllm_version')}, this is {want.trtllm_version}")
    if want.shape and got.get("shape") != want.shape:
        out.append(f"made for shape {got.get('shape')}, this cell is {want.shape}")
    return out


@dataclass(frozen=True)
class Acceptance:
    """What a consumer hands the runtime: the cache variables (empty for a cold start) and why."""

    env: dict[str, str]
    state: str  # warm | cold
    warning: str | None  # one line when a warm bundle was refused

    def line(self) -> str:
        if self.state == "warm":
            return "warm start: the bundle's autotuner and compile caches are handed to the runtime"
        return self.warning or "cold start: the bundle holds no caches (made without a GPU)"


def accept(bundle: Path, want: MadeFor) -> Acceptance:
    """The bundle's caches for a runtime on ``want``'s GPU, version and shape, or a cold start with one
    warning when the bundle was made for anything else."""
    m = read_manifest(bundle)
    if m is None or m.get("state") != "warm":
        return Acceptance({}, "cold", None)
    wrong = mismatches(m, want)
    if wrong:
        return Acceptance({}, "cold", f"warning: cold start, the bundle's caches are not used: {'; '.join(wrong)}")
    env = {k: str(bundle / v) for k, v in CACHE_ENV.items() if (bundle / v).exists()}
    return Acceptance(env, "warm", None)


def local_made_for() -> MadeFor:
    """This host's GPU and TensorRT-LLM (shape not checked: a pod serves the bundle its deployment named)."""
    from importlib.metadata import PackageNotFoundError, version

    from toolchain.hardware.detect import detect_gpus

    gpus = detect_gpus()[0]
    try:
        trtllm = version("tensorrt_llm")
    except PackageNotFoundError:
        trtllm = "not installed"
    return MadeFor(gpus[0].name if gpus else "no GPU", trtllm, {})


def main(argv: list[str]) -> int:
    """``python -m toolchain.artifacts.bundle BUNDLE [--gpu NAME --trtllm VERSION] [--quarantine]``.

    Without ``--quarantine``: the ``export`` lines a server's start script evals to hand the bundle's caches
    to TensorRT-LLM on this host (or on the GPU and version given), or nothing and one warning on stderr.
    With ``--quarantine`` (an init container that cannot see the GPU its pod is scheduled on): a refused
    bundle's ``caches/`` is moved aside in this copy, so the runtime, pointed at it, starts cold."""
    import argparse
    import shlex

    ap = argparse.ArgumentParser(prog="python -m toolchain.artifacts.bundle")
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--gpu", help="the GPU the runtime runs on (default: this host's)")
    ap.add_argument("--trtllm", help="the TensorRT-LLM the runtime has (default: this host's)")
    ap.add_argument("--quarantine", action="store_true", help="move a refused bundle's caches aside")
    a = ap.parse_args(argv)
    if not a.bundle.is_dir():
        print(f"toolchain: {a.bundle} is not a bundle directory", file=sys.stderr)
        return 2
    here = local_made_for() if a.gpu is None or a.trtllm is None else None
    want = MadeFor(a.gpu or (here.gpu if here else ""), a.trtllm or (here.trtllm_version if here else ""), {})
    bundle = a.bundle.resolve()
    got = accept(bundle, want)
    print(f"toolchain: {got.line()}", file=sys.stderr)
    if a.quarantine:
        if got.state == "cold" and (bundle / CACHES).is_dir():
            (bundle / CACHES).rename(bundle / f"{CACHES}.refused")
        return 0
    for k, v in sorted(got.env.items()):
        print(f"export {k}={shlex.quote(v)}")
    return 0


def warmup_steps(cell: Cell) -> list[str]:
    """What a warm-up run does and the cache paths it fills, for ``build --dry-run`` and the docs."""
    f = made_for(cell)
    return [
        f"warm-up: tensorrt_llm.LLM on {f.gpu}, TensorRT-LLM {f.trtllm_version}, TP {f.tp_pp()}; "
        f"batch {f.shape['max_batch_size']} and 1, {f.shape['max_input_len']}-token prompts",
        "fills " + ", ".join(f"{k}=<bundle>/{v}" for k, v in CACHE_ENV.items()),
    ]


def warmup_command(bundle: Path) -> list[str]:
    """The warm-up run, in its own process (a crashed or hung warm-up never takes the build with it)."""
    return [sys.executable, "-m", "toolchain.compile.warmup", str(bundle)]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
