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

from toolchain.artifacts.cell import for_cell
from toolchain.artifacts.layout import cache
from toolchain.artifacts.recipe import is_unquantized
from toolchain.errors import SpecError
from toolchain.progress import Progress, prefixed, silent
from toolchain.specs.matrix import Cell, expand, find_cell
from toolchain.specs.models import EngineSpec


@dataclass
class UpResult:
    spec: str
    cell: str
    engine_key: str | None
    profile_id: str | None
    artifacts: dict[str, str] = field(default_factory=dict)
    stages: dict[str, str] = field(default_factory=dict)
    served_by: str = ""
    bench: dict[str, Any] | None = None
    tpot_floor_ms: float | None = None
    findings: list[dict[str, str]] = field(default_factory=list)


def _ensure_checkpoint(spec: EngineSpec, progress: Progress) -> str:
    src = spec.local_source()
    if src is None or (src / "config.json").is_file():
        return "present"
    if spec.name != "tiny":
        raise SpecError(f"checkpoint not found at {src}", hint="download it there or fix model.source")
    from toolchain.quantize.tiny import make_tiny_checkpoint

    progress(f"creating the tiny checkpoint at {src}")
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
    from toolchain._deps import need_extras

    need_extras("quantize", "triton", "report")
    from toolchain.bench.loadgen import Load
    from toolchain.bench.run import BenchConfig, run_bench, save
    from toolchain.bench.workload import Dist, synthetic
    from toolchain.compile.draft import builds_for
    from toolchain.diagnose.rules import diagnose, observations_from
    from toolchain.errors import NeedsGPUError
    from toolchain.pipeline.emit import emit_cell
    from toolchain.planning.plan import plan_cell
    from toolchain.quantize.run import quantize
    from toolchain.registry import open_registry
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.rules import require_compatible
    from toolchain.triton import server as S

    cell: Cell = find_cell(spec, cell_id) if cell_id else expand(spec)[0]
    require_compatible(spec, [cell])
    res = UpResult(spec.name, cell.id, None, None)

    res.stages["checkpoint"] = _ensure_checkpoint(spec, progress)
    art = for_cell(cell)  # the source checkpoint's digest, computed once for the whole run
    source = art.require_source()
    res.engine_key, res.profile_id = art.engine_key, art.profile_id

    qout = art.quantized_dir
    if is_unquantized(spec):
        raise SpecError(
            f"spec {spec.name} asks for no quantization; `up` runs the ModelOpt pipeline",
            hint="set quantization.weights (e.g. fp8), or use `toolchain build` directly",
        )
    progress(f"quantize ({spec.quantization.weights}, KV {spec.quantization.kv_cache}) with ModelOpt")
    q = quantize(
        spec.local_source() or Path(),
        art.recipe,
        qout,
        reuse=True,
        input_digest=source.get("digest"),
        accuracy_limits=spec.quantization.accuracy,
        progress=prefixed(progress, "  "),
    )
    res.stages["quantize"] = "reused" if q.reused else "done"
    res.artifacts["quantized checkpoint"] = str(qout)
    acc = q.manifest["accuracy"][q.manifest["accuracy"]["gate"]]
    res.stages["accuracy"] = (
        f"rel logit err {acc['rel_logit_error']:.3f}, top-1 {acc['top1_agreement']:.2f} "
        f"({q.manifest['accuracy']['gate']})"
    )

    progress("plan")
    plan = plan_cell(cell, arch_for_spec(spec))
    res.tpot_floor_ms = plan.tpot_floor_b1_ms
    res.stages["plan"] = (
        f"KV budget {plan.kv_budget_bytes / 1e9:.1f} GB, {plan.max_concurrency_at_max_seq} "
        f"requests at max_seq_len, TPOT floor {plan.tpot_floor_b1_ms:.3f} ms on {cell.gpu.name}"
    )

    progress("build (or fetch from the registry)")
    reg = open_registry(registry)
    engine = "reference"
    try:
        b = builds_for(art, reg, progress=prefixed(progress, "  "))[-1]  # draft-target: the draft first
        res.stages["build"] = f"{b.status} ({b.key[:16]})"
        engine = b.key
    except NeedsGPUError as e:
        res.stages["build"] = "skipped: TensorRT-LLM is not installed here (needs an NVIDIA GPU host)"
        progress(f"  {e.message.split(';')[0]}; serving the CPU reference model instead")
    res.served_by = (
        "CPU reference model (PyTorch + transformers), not TensorRT-LLM"
        if engine == "reference"
        else f"tensorrtllm backend, engine {engine[:16]}"
    )

    work = cache().up_work(spec.name, cell.id)
    repo = work / "repo"
    progress(f"emit Triton repository ({'CPU reference model' if engine == 'reference' else 'tensorrtllm'})")
    emit_cell(art, engine, repo, registry=registry, force=True)
    res.artifacts["triton repository"] = str(repo)

    progress("serve (tritonserver on 127.0.0.1)")
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(
        repo,
        ports=ports,
        log_path=work / "tritonserver.log",
        ready_timeout=300,
        extra_args=["--metrics-config=summary_latencies=true"],
        progress=prefixed(progress, "  "),
    )
    res.artifacts["server log"] = str(srv.log_path)
    try:
        progress(f"bench: streaming gRPC through the ensemble, concurrency {','.join(map(str, concurrency))}")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(art.tokenizer_dir())
        t = spec.traffic
        inp = Dist.parse(str(t.input_tokens.mean if t else 32))
        outd = Dist.parse(str(t.output_tokens.mean if t else 16))
        reqs = synthetic(tok, requests + 1, inp, outd, seed=0)
        slo = {"ttft_ms": spec.slo.ttft_ms.p99, "tpot_ms": spec.slo.tpot_ms.p99}
        cfg = BenchConfig(
            "triton",
            srv.grpc_url,
            "ensemble",
            [Load(concurrency=c) for c in concurrency],
            reqs,
            warmup=1,
            metrics_url=srv.metrics_url,
            slo=slo,
            provenance={
                "spec": spec.name,
                "cell": cell.id,
                "engine_key": res.engine_key,
                "profile_id": res.profile_id,
                "gpu": cell.gpu.name,
                "reference": res.served_by if engine == "reference" else None,
            },
        )
        result = run_bench(cfg, progress=prefixed(progress, "  "))
        result["planner"] = {"tpot_floor_b1_ms": plan.tpot_floor_b1_ms, "gpu": cell.gpu.name}
        save(result, work / "bench.json")
        res.bench = result
        res.artifacts["bench result"] = str(work / "bench.json")
        from toolchain.bench.report import render

        files = render([result], work / "report", floor_ms=plan.tpot_floor_b1_ms)
        res.artifacts["report"] = str(files["markdown"])
        res.findings = [
            f.to_json() for f in diagnose(observations_from(result, None, spec.serving.enable_prefix_caching))
        ]
        res.stages["bench"] = "done"
    finally:
        progress("stop the server")
        srv.stop()
    return res
