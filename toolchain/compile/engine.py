"""Build (or fetch) the artifact of each matrix cell, and publish it to the registry on success.

runtime tensorrt: quantized TRT-LLM checkpoint → `trtllm-build` (log streamed to a file, temp
output dir) → drift check of the engine's build_config → registry put with provenance.
runtime pytorch: unified HF checkpoint + validated LLM-API options YAML → registry put.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain import settings, yamlout
from toolchain.artifacts.cell import CellArtifacts
from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import is_unquantized
from toolchain.artifacts.source import carried_dir, source_dir
from toolchain.artifacts.store import ArtifactStore
from toolchain.compile.provenance import installed_versions, provenance
from toolchain.compile.speculative import heads_architecture, heads_convert_args, heads_dir
from toolchain.compile.synth import build_drift, expected_build_config, trtllm_build_args
from toolchain.digest import hash_file
from toolchain.errors import (
    BuildDriftError,
    CheckpointError,
    CompatibilityError,
    EngineBuildError,
    NeedsGPUError,
)
from toolchain.proc import run_logged, tail
from toolchain.progress import Heartbeat, Progress, silent
from toolchain.specs.llmapi import bundled_models, llmapi_options
from toolchain.specs.matrix import Cell
from toolchain.specs.rules import require_compatible, version_matches

ENGINE_CONTAINER_HINT = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3 (TensorRT-LLM 1.1.0)"


@dataclass
class CellBuild:
    cell: Cell
    key: str
    status: str  # cached | built | planned | published
    command: list[str] = field(default_factory=list)
    checkpoint: Path | None = None
    log_path: Path | None = None
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    bundle: str | None = None  # runtime pytorch: "warm" or "cold" (toolchain.artifacts.bundle)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell.id,
            "spec": self.cell.spec.name,
            "engine_key": self.key,
            "status": self.status,
            "command": shlex.join(self.command) if self.command else None,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "log": str(self.log_path) if self.log_path else None,
            "seconds": self.seconds,
            "notes": self.notes,
            **({"bundle": self.bundle} if self.bundle else {}),
        }


def check_checkpoint(cell: Cell, ckpt: Path) -> str:
    """The TRT-LLM checkpoint must match the spec: architecture, dtype, quantization, world size."""
    from toolchain.artifacts.quantized import QUANT_ALGO
    from toolchain.specs.families import CONVERTERS

    cfg_path = ckpt / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(
            f"{ckpt} has no config.json; it is not a TensorRT-LLM checkpoint",
            f"run `toolchain quantize {cell.spec.name}` first",
        )
    cfg = json.loads(cfg_path.read_text())
    q = cell.spec.quantization
    arch = cfg.get("architecture")
    problems = []
    if arch not in CONVERTERS and arch != heads_architecture(cell):
        problems.append(f"architecture {arch!r} is not one this toolchain builds")
    if cfg.get("dtype") != cell.spec.model.dtype:
        problems.append(f"dtype {cfg.get('dtype')!r} != spec model.dtype {cell.spec.model.dtype!r}")
    qc = cfg.get("quantization") or {}
    if q.weights in QUANT_ALGO and qc.get("quant_algo") != QUANT_ALGO[q.weights]:
        problems.append(f"quant_algo {qc.get('quant_algo')!r} != {QUANT_ALGO[q.weights]!r} for {q.weights}")
    want_kv = {"fp8": "FP8", "int8": "INT8"}.get(q.kv_cache)
    if qc.get("kv_cache_quant_algo") != want_kv:
        problems.append(f"kv_cache_quant_algo {qc.get('kv_cache_quant_algo')!r} != {want_kv!r}")
    mapping = cfg.get("mapping") or {}
    if mapping.get("world_size") != cell.world_size or mapping.get("tp_size", 1) != cell.tp:
        problems.append(
            f"mapping world_size {mapping.get('world_size')} tp {mapping.get('tp_size')} != "
            f"cell TP{cell.tp} PP{cell.pp}"
        )
    missing = [r for r in range(cell.world_size) if not (ckpt / f"rank{r}.safetensors").is_file()]
    if missing:
        problems.append(f"rank{missing[0]}.safetensors is missing")
    if problems:
        raise CheckpointError(
            f"checkpoint {ckpt} does not match spec {cell.spec.name} cell {cell.id}: " + "; ".join(problems),
            "re-run `toolchain quantize SPEC --force`",
        )
    return str(arch)


class _GpuMemSampler:
    """Peak GPU memory used during a build, sampled through NVML (None without a GPU)."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            return
        while not self._stop.wait(0.5):
            used = sum(int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)
            self.peak = max(self.peak or 0, used)

    def __enter__(self) -> _GpuMemSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(2)


def _check_versions(cell: Cell, versions: dict[str, str | None]) -> None:
    t = cell.spec.target
    got_llm, got_trt = versions.get("tensorrt_llm"), versions.get("tensorrt")
    if got_llm != t.trtllm_version:
        raise CompatibilityError(
            f"installed TensorRT-LLM is {got_llm}, the spec targets {t.trtllm_version}",
            f"build inside the container for {t.trtllm_version}, or change target.trtllm_version",
        )
    want_trt = t.tensorrt()
    if got_trt is not None and want_trt is not None and not version_matches(want_trt, str(got_trt)):
        raise CompatibilityError(
            f"installed TensorRT is {got_trt}, the spec targets {want_trt}",
            "use the matching container, or correct target.tensorrt_version",
        )


def _check_local_gpu(cell: Cell, notes: list[str]) -> None:
    from toolchain.hardware.detect import detect_gpus

    gpus, reason = detect_gpus()
    if not gpus:
        notes.append(f"no GPU detected ({reason}); the build tool decides whether it can build")
        return
    if not any(g.name == cell.gpu.nvml_name for g in gpus):
        raise CompatibilityError(
            f"cell {cell.id} targets {cell.gpu.nvml_name}; this host has {gpus[0].name}",
            "build each cell on its own GPU class (see `toolchain matrix`)",
        )


def plan_cell_build(
    art: CellArtifacts, registry: ArtifactStore, *, force: bool = False, held: set[str] | None = None
) -> CellBuild:
    """What building one cell would do. ``held``: the engine keys the registry holds, when the caller
    asked once for many cells (``Registry.existing``); otherwise the registry is asked for this key."""
    cell = art.cell
    require_compatible(cell.spec, [cell])
    key = engine_key_of(art)
    ckpt = art.quantized_dir
    if cell.spec.runtime == "tensorrt":
        cmd = trtllm_build_args(
            cell,
            Path("<converted checkpoint>") if is_unquantized(cell.spec) else ckpt / "trtllm",
            Path("<tmp>/engine"),
            timing_cache_in=Path("<tmp>/timing.cache"),
            timing_cache_out=Path("<tmp>/model.cache"),
        )
    else:
        cmd = []
    cached = key in held if held is not None else registry.exists(key)
    status = "cached" if cached and not force else "planned"
    plan = CellBuild(cell, key, status, cmd, ckpt)
    if cell.spec.runtime == "pytorch" and status == "planned":
        _plan_bundle(cell, plan)
    if status == "planned" and not is_unquantized(cell.spec) and not (ckpt / "manifest.json").is_file():
        plan.notes.append(  # no registry request per cell: a dry run of many cells lists the registry once
            f"the quantized checkpoint {ckpt} does not exist yet: run `toolchain quantize SPEC` "
            "(or `toolchain up SPEC`) first; the build fetches it from the registry if it is stored there, "
            "and refuses to start otherwise"
        )
    return plan


def engine_key_of(art: CellArtifacts) -> str:
    """The cell's engine key; a missing source checkpoint is a user error."""
    art.require_source()
    assert art.engine_key is not None
    return art.engine_key


def build_cell(
    art: CellArtifacts,
    registry: ArtifactStore,
    *,
    force: bool = False,
    log_dir: Path | None = None,
    timeout: float | None = None,
    provenance_extra: dict[str, Any] | None = None,
    progress: Progress = silent,
    held: set[str] | None = None,
    rehash: bool = False,
) -> CellBuild:
    """Build one cell. The quantized checkpoint is trusted by its files' verified stat signatures;
    ``rehash`` reads every file again instead."""
    plan = plan_cell_build(art, registry, force=force, held=held)
    if plan.status == "cached":
        return plan
    cell = art.cell
    ckpt_root = plan.checkpoint
    assert ckpt_root is not None
    unquantized = is_unquantized(cell.spec)
    trtllm_ckpt = Path("<converted>") if unquantized else ckpt_root / "trtllm"
    if cell.spec.runtime == "tensorrt":
        # an engine needs a GPU host: said first (exit 4), before asking for a quantized checkpoint that this
        # machine could not build an engine from anyway (nor, for a large model, quantize)
        _require_trtllm_build(cell, trtllm_ckpt)
    if not unquantized:
        _ensure_quantized(art, registry, ckpt_root, rehash=rehash)
    if cell.spec.runtime == "pytorch":
        hf = source_dir(cell.spec) if unquantized else ckpt_root / "hf"
        return _publish_llmapi(cell, plan, registry, hf, force=force)
    log_path = cache().build_log(cell.id, plan.key)
    if log_dir is not None:
        log_path = log_dir / log_path.name
    plan.log_path = log_path
    versions = installed_versions()
    _check_versions(cell, versions)
    _check_local_gpu(cell, plan.notes)

    work = Path(tempfile.mkdtemp(prefix=f"build-{plan.key[:12]}.", dir=_work_root()))
    try:
        if log_path.exists():
            log_path.unlink()
        ckpt_dir = (
            _convert(cell, source_dir(cell.spec), work, log_path, plan, progress)
            if unquantized
            else ckpt_root / "trtllm"
        )
        arch = check_checkpoint(cell, ckpt_dir)
        out_dir = work / "engine"
        tc_key = art.timing_cache_key
        tc_in = _fetch_timing_cache(registry, tc_key, work)
        tc_out = work / "model.cache"
        cmd = trtllm_build_args(
            cell, ckpt_dir, out_dir, architecture=arch, timing_cache_in=tc_in, timing_cache_out=tc_out
        )
        plan.command = cmd
        t0 = time.time()
        with _GpuMemSampler() as mem:
            plan.seconds = round(
                _run_step(f"trtllm-build for cell {cell.id}", cmd, log_path, work, timeout, progress), 2
            )
        _check_engine(cell, out_dir, arch, log_path)
        shutil.copyfile(log_path, out_dir / "toolchain-build.log")
        prov = _engine_provenance(cell, plan, versions, t0, mem.peak, ckpt_root, unquantized=unquantized)
        prov |= provenance_extra or {}
        registry.put(plan.key, out_dir, kind="engine", provenance=prov, force=force)  # --force replaces it
        if tc_out.is_file():
            _push_timing_cache(registry, tc_key, tc_out, work, cell)
        plan.status = "built"
        return plan
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ensure_quantized(art: CellArtifacts, registry: ArtifactStore, ckpt_root: Path, *, rehash: bool) -> None:
    """A complete quantized checkpoint at ``ckpt_root``, fetched from the registry when it was quantized elsewhere."""
    from toolchain.artifacts.quantized import verify_output

    if verify_output(ckpt_root, rehash=rehash) is None:
        qkey = art.quantized_key
        if registry.exists(qkey):  # quantized once elsewhere (CI quantize job)
            registry.get(qkey, ckpt_root, force=True)
    if verify_output(ckpt_root, rehash=rehash) is None:
        raise CheckpointError(
            f"no complete quantized checkpoint at {ckpt_root}",
            "run `toolchain quantize` on the spec first (or `toolchain up SPEC`)",
        )


def _require_trtllm_build(cell: Cell, ckpt_dir: Path) -> None:
    """Refuse, showing the command it would run, when trtllm-build is not installed here."""
    if shutil.which("trtllm-build") is None:
        cmd = trtllm_build_args(cell, ckpt_dir, Path("<out>"))
        raise NeedsGPUError(
            f"trtllm-build is not installed here (TensorRT-LLM needs an NVIDIA GPU host); it would run: "
            f"{shlex.join(cmd)}",
            f"run `toolchain build` inside {ENGINE_CONTAINER_HINT} on a {cell.gpu.name}",
        )


def _fetch_timing_cache(registry: ArtifactStore, tc_key: str, work: Path) -> Path | None:
    """The GPU's timing cache from the registry, copied under ``work`` (None when there is none yet)."""
    if registry.exists(tc_key):
        registry.get(tc_key, work / "tc")
        return work / "tc" / "model.cache"
    return None


def _engine_provenance(
    cell: Cell,
    plan: CellBuild,
    versions: dict[str, str | None],
    t0: float,
    peak_gpu_memory: int | None,
    ckpt_root: Path,
    *,
    unquantized: bool,
) -> dict[str, Any]:
    """What the registry records about a built engine: versions, spec, cell, command, time, memory, checkpoint."""
    prov = provenance(versions) | {
        "spec": cell.spec.model_dump(mode="json"),
        "cell": cell.axes(),
        "cell_id": cell.id,
        "command": plan.command,
        "build_seconds": round(time.time() - t0, 2),
        "peak_gpu_memory_bytes": peak_gpu_memory,
        "checkpoint_manifest_digest": None if unquantized else hash_file(ckpt_root / "manifest.json"),
        "converter": plan.notes[-1] if unquantized else None,
        "checkpoint": str(ckpt_root),
        "target": cell.spec.target.model_dump(),
    }
    if prov["container_image"] is None:
        prov["container_image"] = cell.spec.target.container
    return prov


def _push_timing_cache(registry: ArtifactStore, tc_key: str, tc_out: Path, work: Path, cell: Cell) -> None:
    """Publish the timing cache this build refined; the newest one replaces the GPU's entry."""
    (work / "tcpush").mkdir()
    os.replace(tc_out, work / "tcpush" / "model.cache")
    registry.put(tc_key, work / "tcpush", kind="timing-cache", provenance={"gpu": cell.gpu.nvml_name}, force=True)


def _work_root() -> Path:
    p = cache().build_work
    p.mkdir(parents=True, exist_ok=True)
    return p


def _check_engine(cell: Cell, out_dir: Path, arch: str, log_path: Path) -> None:
    cfg_path = out_dir / "config.json"
    if not cfg_path.is_file():
        raise EngineBuildError(f"trtllm-build exited 0 but wrote no config.json in {out_dir}", log_path=log_path)
    missing = [r for r in range(cell.world_size) if not (out_dir / f"rank{r}.engine").is_file()]
    if missing:
        raise EngineBuildError(f"trtllm-build wrote no rank{missing[0]}.engine", log_path=log_path)
    drift = build_drift(expected_build_config(cell, arch), json.loads(cfg_path.read_text()))
    if drift:
        raise BuildDriftError(
            f"the engine TensorRT-LLM built for cell {cell.id} differs from what was asked: " + "; ".join(drift),
            log_path=log_path,
            hint="nothing was published; adjust the spec to what this TensorRT-LLM allows",
        )


def _run_step(
    what: str, cmd: list[str], log_path: Path, cwd: Path, timeout: float | None, progress: Progress = silent
) -> float:
    """Run one build step with its output in the build log; a failure names the log and publishes nothing.

    Progress: the log path first, then elapsed time and the latest log line every second.
    """
    progress(f"{what}: log {log_path}")
    with Heartbeat(progress, what, lambda: tail(log_path, 1)[:200] or None):
        res = run_logged(cmd, log_path, cwd=cwd, timeout=timeout)
    if res.returncode != 0:
        raise EngineBuildError(
            f"{what} failed (exit {res.returncode}); nothing was published. Log tail:\n{tail(log_path, 15)}",
            cmd=cmd,
            returncode=res.returncode,
            log_path=log_path,
        )
    return res.seconds


def _convert(
    cell: Cell, hf_dir: Path, work: Path, log_path: Path, plan: CellBuild, progress: Progress = silent
) -> Path:
    """Unquantized checkpoints go through TensorRT-LLM's per-model convert_checkpoint.py."""
    from toolchain.compile.synth import convert_checkpoint_args

    cfg = json.loads((hf_dir / "config.json").read_text())
    arch = (cfg.get("architectures") or ["?"])[0]
    root = settings.trtllm_root()
    heads = heads_dir(cell)  # Medusa/EAGLE: base and heads convert together (compile.speculative)
    if heads is not None:
        cmd = heads_convert_args(cell, hf_dir, heads, work / "ckpt", root)
    else:
        cmd = convert_checkpoint_args(cell, arch, hf_dir, work / "ckpt", root)
    if not Path(cmd[1]).is_file():
        raise NeedsGPUError(
            f"the TensorRT-LLM converter {cmd[1]} is not here",
            "set TRTLLM_ROOT to the TensorRT-LLM source tree of the targeted release",
        )
    _run_step("convert_checkpoint.py", cmd, log_path, work, None, progress)
    plan.notes.append(shlex.join(cmd))
    return work / "ckpt"


def _carry_models(cell: Cell, out: Path) -> None:
    """Copy the draft model and LoRA adapters the options name into the artifact (``draft/``,
    ``lora/<n>-<name>/``): it is served on another host (trtllm-serve runs in the artifact's directory),
    where the building host's paths do not exist; a pinned hf:// one is downloaded at its revision.
    Unpinned Hub ids stay ids."""
    for rel, source in bundled_models(cell.spec).items():
        shutil.copytree(carried_dir(rel, source), out / rel, copy_function=shutil.copy2)


def _publish_llmapi(cell: Cell, plan: CellBuild, registry: ArtifactStore, hf: Path, *, force: bool) -> CellBuild:
    """PyTorch runtime: the warm-start bundle (toolchain.artifacts.bundle): the unified HF checkpoint, the
    LLM-API options file and, on a GPU host with TensorRT-LLM, the caches a warm-up run on the cell's GPU
    writes; elsewhere a cold bundle, said so in the build's notes."""
    from toolchain.artifacts import bundle as B

    work = Path(tempfile.mkdtemp(prefix=f"llmapi-{plan.key[:12]}.", dir=_work_root()))
    try:
        out = work / "artifact"
        shutil.copytree(hf, out / "hf", copy_function=os.link)
        opts = llmapi_options(cell)
        _carry_models(cell, out)
        (out / "extra_llm_api_options.yaml").write_text(yamlout.dump(opts, sort_keys=True))
        (out / B.MANIFEST).write_text(json.dumps(B.manifest(cell, warm=False), indent=2))
        warm_why = _warmup_refusal(cell)
        if warm_why is None:
            caches, seconds = _warm_up(cell, out, plan)
            (out / B.MANIFEST).write_text(json.dumps(B.manifest(cell, warm=True, caches=caches, seconds=seconds)))
            plan.bundle = "warm"
            plan.notes.append(f"warm-start bundle: {len(caches)} cache files from a {seconds:.0f} s warm-up")
        else:
            plan.bundle = "cold"
            plan.notes.append(f"cold bundle (checkpoint and options, no caches): {warm_why}")
        prov = provenance({"tensorrt_llm": None, "tensorrt": None}) | {
            "spec": cell.spec.model_dump(mode="json"),
            "cell": cell.axes(),
            "cell_id": cell.id,
            # run in the artifact's directory: the options name the carried draft/adapters relative to it
            "cwd": "<artifact>",
            "command": ["trtllm-serve", "hf", "--extra_llm_api_options", "extra_llm_api_options.yaml"],
            "target": cell.spec.target.model_dump(),
            "bundle": plan.bundle,
        }
        registry.put(plan.key, out, kind=B.KIND, provenance=prov, force=force)  # --force replaces it
        plan.status = "published"
        return plan
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plan_bundle(cell: Cell, plan: CellBuild) -> None:
    """What publishing the cell's warm-start bundle will do, and the cache paths it fills."""
    from toolchain.artifacts import bundle as B

    why = _warmup_refusal(cell)
    plan.bundle = "cold" if why else "warm"
    if why is None:
        plan.command = B.warmup_command(Path("<bundle>"))
    else:
        plan.notes.append(f"cold bundle: {why}")
    plan.notes.extend(B.warmup_steps(cell))


def _warmup_refusal(cell: Cell) -> str | None:
    """Why this host cannot warm the cell's bundle up (None: it can)."""
    import importlib.util

    from toolchain.hardware.detect import detect_gpus

    if importlib.util.find_spec("tensorrt_llm") is None:
        return "TensorRT-LLM is not installed here (the warm-up runs on a GPU host)"
    gpus = [g.name for g in detect_gpus()[0]]
    if cell.gpu.nvml_name not in gpus or len(gpus) < cell.tp * cell.pp:
        return f"the warm-up needs {cell.tp * cell.pp} × {cell.gpu.nvml_name}; this host has {gpus or 'no GPU'}"
    return None


def _warm_up(cell: Cell, out: Path, plan: CellBuild) -> tuple[list[str], float]:
    """Run the warm-up in its own process with the cache variables pointing into the bundle; the cache
    files it wrote, and how long it took."""
    from toolchain.artifacts import bundle as B

    env = dict(os.environ)  # the warm-up inherits the environment, with the caches pointed into the bundle
    env.update({k: str(out / v) for k, v in B.CACHE_ENV.items()})
    (out / B.CACHES).mkdir()
    log_path = cache().build_log(cell.id, plan.key)
    plan.log_path = log_path
    t0 = time.monotonic()
    res = run_logged(B.warmup_command(out), log_path, cwd=out, env=env)
    if res.returncode != 0:
        raise EngineBuildError(
            f"the warm-up run of cell {cell.id} exited {res.returncode}",
            cmd=B.warmup_command(out), returncode=res.returncode, log_path=log_path,
        )  # fmt: skip
    files = sorted(str(p.relative_to(out)) for p in (out / B.CACHES).rglob("*") if p.is_file())
    return files, time.monotonic() - t0
