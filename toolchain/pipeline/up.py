"""`toolchain up SPEC`: quantize -> plan -> build (or fetch) -> emit -> serve -> bench -> report.

Every stage is resumable: the quantized checkpoint is reused when its manifest verifies, the
registry answers whether the engine exists, an emitted repository with the same identity is
reused, and the benchmark result is written per run. On a machine without TensorRT-LLM the
serving stage uses the CPU reference model and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.artifacts.bench_result import BenchResult, Startup
from toolchain.artifacts.cell import CellArtifacts, for_cell
from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import is_unquantized
from toolchain.compile.engine import CellBuild
from toolchain.errors import NeedsGPUError, SpecError
from toolchain.planning.plan import CellPlan, plan_cell
from toolchain.progress import Progress, importing, prefixed, silent
from toolchain.specs.arch import arch_for_spec
from toolchain.specs.matrix import Cell, expand, find_cell
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import require_compatible
from toolchain.triton.llmapi_repo import STANDIN_NOTE
from toolchain.units import fmt_bytes, fmt_ms

REFERENCE = "reference"


def trtllm_installed() -> bool:
    """Whether TensorRT-LLM's Python package is importable here (it needs an NVIDIA GPU host)."""
    import importlib.util

    return importlib.util.find_spec("tensorrt_llm") is not None


def bundle_state(build: CellBuild) -> str:
    """What the PyTorch runtime's warm-start bundle holds: warm (caches from a warm-up on the target GPU) or cold."""
    if build.bundle == "warm":
        return "warm-start bundle"
    if build.bundle == "cold":
        return "cold bundle (no autotuner or compile caches: made without a GPU)"
    return "bundle"


@dataclass
class UpResult:
    spec: str
    cell: str
    engine_key: str | None
    profile_id: str | None
    artifacts: dict[str, str] = field(default_factory=dict)
    stages: dict[str, str] = field(default_factory=dict)
    served_by: str = ""
    bench: BenchResult | None = None
    tpot_floor_ms: float | None = None
    findings: list[dict[str, str]] = field(default_factory=list)


def _ensure_checkpoint(spec: EngineSpec, progress: Progress) -> str:
    src = spec.local_source()
    if src is None or (src / "config.json").is_file():
        return "present"
    from toolchain.specs.sources import is_tiny

    if not is_tiny(spec.name):
        raise SpecError(f"checkpoint not found at {src}", hint="download it there or fix model.source")
    from toolchain.quantize.tiny import make_tiny_checkpoint

    progress(f"creating the tiny checkpoint at {src}")
    importing(prefixed(progress, "  "), ("torch", "transformers"), "importing torch and transformers")
    progress("  writing its random weights and BPE tokenizer")
    make_tiny_checkpoint(src)
    return "created"


def run_up(
    spec: EngineSpec,
    *,
    cell_id: str | None = None,
    registry: str | None = None,
    requests: int = 8,
    concurrency: tuple[int, ...] = (1, 2),
    progress: Progress = silent,
) -> UpResult:
    """Run every stage for one cell (default: the first), in order; each stage records what it did in the result."""
    from toolchain._deps import need_extras

    need_extras("quantize", "triton", "report")
    cell: Cell = find_cell(spec, cell_id) if cell_id else expand(spec)[0]
    require_compatible(spec, [cell])
    if is_unquantized(spec):
        raise SpecError(
            f"spec {spec.name} asks for no quantization; `up` runs the ModelOpt pipeline",
            hint="set quantization.weights (e.g. fp8), or use `toolchain build` directly",
        )
    res = UpResult(spec.name, cell.id, None, None)
    res.stages["checkpoint"] = _ensure_checkpoint(spec, progress)
    art = for_cell(cell)  # the source checkpoint's digest, computed once for the whole run
    art.require_source()
    res.engine_key, res.profile_id = art.engine_key, art.profile_id

    _quantize(art, res, progress)
    plan = _plan(cell, res, progress)
    engine = _build(art, registry, res, progress)
    work = cache().up_work(spec.name, cell.id)
    repo = _emit(art, engine, registry, work, res, progress)
    _serve_and_bench(art, plan, repo, work, engine, requests, concurrency, res, progress)
    return res


def _quantize(art: CellArtifacts, res: UpResult, progress: Progress) -> None:
    from toolchain.quantize.run import quantize

    spec = art.spec
    progress(f"quantize ({spec.quantization.weights}, KV {spec.quantization.kv_cache}) with ModelOpt")
    q = quantize(
        spec.local_source() or Path(),
        art.recipe,
        art.quantized_dir,
        reuse=True,
        input_digest=art.require_source().get("digest"),
        accuracy_limits=spec.quantization.accuracy,
        progress=prefixed(progress, "  "),
    )
    res.stages["quantize"] = "reused" if q.reused else "done"
    res.artifacts["quantized checkpoint"] = str(art.quantized_dir)
    gate = q.manifest["accuracy"]["gate"]
    acc = q.manifest["accuracy"][gate]
    res.stages["accuracy"] = f"rel logit err {acc['rel_logit_error']:.3f}, top-1 {acc['top1_agreement']:.2f} ({gate})"


def _plan(cell: Cell, res: UpResult, progress: Progress) -> CellPlan:
    progress("plan")
    plan = plan_cell(cell, arch_for_spec(cell.spec))
    res.tpot_floor_ms = plan.tpot_floor_b1_ms
    full = cell.max_batch_size * cell.max_seq_len * plan.kv_bytes_per_token  # the cell's whole batch at max_seq_len
    res.stages["plan"] = (
        f"KV of {cell.max_batch_size} × {cell.max_seq_len} tokens: {fmt_bytes(full)} of "
        f"{fmt_bytes(plan.kv_budget_bytes)} on {cell.gpu.name}; TPOT floor {fmt_ms(plan.tpot_floor_b1_ms)}"
    )
    return plan


def _build(art: CellArtifacts, registry: str | None, res: UpResult, progress: Progress) -> str:
    """The engine key built or found in the registry, or ``reference`` where TensorRT-LLM cannot run."""
    from toolchain.compile.draft import builds_for
    from toolchain.registry import open_registry

    progress("build (or fetch from the registry)")
    engine = REFERENCE
    try:
        reg = open_registry(registry)
        b = builds_for(art, reg, progress=prefixed(progress, "  "))[-1]  # draft first
        res.stages["build"] = f"{b.status} ({b.key[:16]})"
        engine = b.key
        if art.spec.runtime == "pytorch":
            if b.status == "cached":  # what the stored bundle is (entries from before bundles are cold)
                b.bundle = str(reg.show(b.key).provenance.get("bundle") or "cold")
            res.stages["build"] += f", {bundle_state(b)}"
            if not trtllm_installed():
                progress("  TensorRT-LLM is not installed here (needs an NVIDIA GPU host); serving the CPU stand-in")
                res.served_by = STANDIN_NOTE
                return engine
    except NeedsGPUError as e:
        res.stages["build"] = "skipped: TensorRT-LLM is not installed here (needs an NVIDIA GPU host)"
        progress(f"  {e.message.split(';')[0]}; serving the CPU reference model instead")
    res.served_by = (
        "CPU reference model (PyTorch + transformers), not TensorRT-LLM"
        if engine == REFERENCE
        else f"tensorrtllm backend, engine {engine[:16]}"
    )
    return engine


def _emit(art: CellArtifacts, engine: str, registry: str | None, work: Path, res: UpResult, progress: Progress) -> Path:
    from toolchain.pipeline.emit import emit_cell

    repo = fresh_repo(work)
    standin = res.served_by == STANDIN_NOTE
    what = (
        "llmapi, CPU stand-in"
        if standin
        else "llmapi"
        if art.spec.runtime == "pytorch"
        else "CPU reference model"
        if engine == REFERENCE
        else "tensorrtllm"
    )
    progress(f"emit Triton repository ({what})")
    emitted = emit_cell(art, engine, repo, registry=registry, force=True, standin=standin)
    if emitted.get("reference_weights"):  # what the CPU reference model serves (the quantized export, dequantized)
        res.served_by = f"{res.served_by}, serving the {emitted['reference_weights']}"
    res.artifacts["triton repository"] = str(repo)
    return repo


def _serve_and_bench(
    art: CellArtifacts,
    plan: CellPlan,
    repo: Path,
    work: Path,
    engine: str,
    requests: int,
    concurrency: tuple[int, ...],
    res: UpResult,
    progress: Progress,
) -> None:
    from toolchain.triton import server as S

    progress("serve (tritonserver on 127.0.0.1)")
    srv = S.start(
        repo,
        ports=S.Ports(S.free_port(), S.free_port(), S.free_port()),
        log_path=work / "tritonserver.log",
        ready_timeout=300,
        extra_args=["--metrics-config=summary_latencies=true"],
        progress=prefixed(progress, "  "),
    )
    res.artifacts["server log"] = str(srv.log_path)
    try:
        startup = _startup(art, repo, srv, res, progress)
        through = "the llmapi model" if art.spec.runtime == "pytorch" else "the ensemble"
        progress(f"bench: streaming gRPC through {through}, concurrency {','.join(map(str, concurrency))}")
        result = _bench(art, plan, srv.grpc_url, srv.metrics_url, engine, requests, concurrency, res, progress)
        result = result.model_copy(update={"startup": startup})
        progress("report: Markdown/HTML with plots, and the diagnosis")
        _report(art, plan, result, work, res)
        res.stages["bench"] = "done"
    finally:
        progress("stop the server")
        srv.stop(progress=prefixed(progress, "  "))


def _startup(art: CellArtifacts, repo: Path, srv: Any, res: UpResult, progress: Progress) -> Startup:
    """Start-up as the bench result records it: launch to ready, the first request's latency, and what the
    runtime started with (a warm or cold bundle; engines have none). Here, with the stand-in, its figures."""
    from toolchain.triton.client import stream_generate
    from toolchain.triton.llmapi_repo import start_from_log

    pytorch = art.spec.runtime == "pytorch"
    progress("  first request (start-up latency)")
    first = stream_generate(srv.grpc_url, "tensorrt_llm" if pytorch else "ensemble", "Hello", 8, llmapi=pytorch)
    first_ms = round((first.times[-1] - first.sent) * 1000, 1) if first.times and first.error is None else None
    standin = res.served_by.startswith(STANDIN_NOTE)
    if pytorch:  # what the llmapi model said it handed the runtime, from the server log
        start = start_from_log(srv.log_path) or "not reported by the model"
        bundle = "warm" if start.startswith("warm") else "cold"
    else:
        bundle, start = "none", "engines load prebuilt; no warm-up caches"
    stand_in = standin or res.served_by.startswith("CPU")
    measured_on = res.served_by.split(", serving")[0] if stand_in else "TensorRT-LLM"
    ready = srv.ready_s or 0.0
    figures = " (the CPU stand-in's figures)" if stand_in else ""
    first_text = f"first request {first_ms:.0f} ms" if first_ms is not None else "first request failed"
    how = "engines" if bundle == "none" else f"{bundle} start"
    res.stages["startup"] = f"ready in {ready:.1f} s, {first_text}, {how}{figures}"
    return Startup(ready_s=ready, first_request_ms=first_ms, bundle=bundle, start=start, measured_on=measured_on)


def _bench(
    art: CellArtifacts,
    plan: CellPlan,
    grpc_url: str,
    metrics_url: str,
    engine: str,
    requests: int,
    concurrency: tuple[int, ...],
    res: UpResult,
    progress: Progress,
) -> BenchResult:
    from transformers import AutoTokenizer

    from toolchain.bench.options import BenchOptions
    from toolchain.bench.run import BenchWorkload, run_bench
    from toolchain.bench.workload import Dist, synthetic
    from toolchain.pipeline.bench import planner_floor, with_planner

    spec, cell = art.spec, art.cell
    progress("  loading the tokenizer and the prompts")
    tok = AutoTokenizer.from_pretrained(art.tokenizer_dir())
    t = spec.traffic
    inp = Dist.parse(str(t.input_tokens.mean if t else 32))
    outd = Dist.parse(str(t.output_tokens.mean if t else 16))
    opts = BenchOptions(
        url=grpc_url,
        protocol="triton",
        concurrency=",".join(str(c) for c in concurrency),
        requests=requests,
        warmup=1,
        metrics_url=metrics_url,
    )
    work = BenchWorkload(
        served="tensorrt_llm" if spec.runtime == "pytorch" else "ensemble",
        requests=synthetic(tok, requests + 1, inp, outd, seed=0),
        slo={"ttft_ms": spec.slo.ttft_ms.p99, "tpot_ms": spec.slo.tpot_ms.p99},
        provenance={
            **art.identity(),
            "gpu": cell.gpu.name,
            "reference": res.served_by if engine == REFERENCE or res.served_by.startswith(STANDIN_NOTE) else None,
        },
    )
    result = run_bench(opts, work, progress=prefixed(progress, "  "))
    return with_planner(result, planner_floor(cell, plan))


def _report(art: CellArtifacts, plan: CellPlan, result: BenchResult, work: Path, res: UpResult) -> None:
    from toolchain.bench.report import render
    from toolchain.bench.run import save
    from toolchain.diagnose.rules import diagnose, observations_from

    save(result, work / "bench.json")
    res.bench = result
    res.artifacts["bench result"] = str(work / "bench.json")
    files = render([result], work / "report", floor_ms=plan.tpot_floor_b1_ms)
    res.artifacts["report"] = str(files["markdown"])
    observations = observations_from(result, None, art.spec.serving.enable_prefix_caching)
    res.findings = [f.to_json() for f in diagnose(observations)]


def fresh_repo(work: Path) -> Path:
    """The repository path in up's own work directory ($TOOLCHAIN_CACHE/up/SPEC-CELL). A repository an older
    toolchain left there, before output directories carried their ownership marker, is up's own: it is removed,
    so the guarded writer (toolchain.outdir) does not refuse the README's first command after an upgrade."""
    import shutil

    from toolchain.outdir import MARKER

    repo = work / "repo"
    if repo.is_dir() and not (repo / MARKER).exists():
        shutil.rmtree(repo)
    return repo
