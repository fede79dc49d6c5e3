"""Turn CLI choices into a BenchConfig: tokenizer, workload, loads, SLOs and provenance."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.artifacts.cell import CellArtifacts, for_cell
from toolchain.bench.loadgen import Load
from toolchain.bench.run import BenchConfig
from toolchain.bench.workload import Dist, Request, dataset, shared_prefix, synthetic
from toolchain.errors import UserInputError

if TYPE_CHECKING:
    from toolchain.specs.matrix import Cell

DEFAULT_INPUT, DEFAULT_OUTPUT = "64", "32"


def dist_text(d: Any) -> str:
    """A spec's TokenDist in the --input-tokens/--output-tokens form (N, normal:M:S, uniform:LO:HI)."""
    if d.dist == "fixed":
        return str(d.mean)
    if d.dist == "normal":
        return f"normal:{d.mean}:{d.std:g}"
    return f"uniform:{d.min}:{d.max}"


PROTOCOLS = ("triton", "openai", "openai-chat")


def parse_list(text: str | None, kind: type) -> list[Any]:
    if not text:
        return []
    try:
        vals = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise UserInputError(f"cannot read the list {text!r}", "use comma-separated numbers, e.g. 1,4,16") from exc
    if any(v <= 0 for v in vals):
        raise UserInputError(f"values in {text!r} must be positive")
    return vals


def _repo_meta(path: Path) -> dict[str, Any]:
    """The repository's marker written by `toolchain triton emit`; anything else is a user error, not a crash."""
    fix = "point --repo at a repository written by `toolchain triton emit`, or emit it again"
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise UserInputError(f"{path} is not a readable toolchain-repo.json", fix) from exc
    if not isinstance(meta, dict):
        raise UserInputError(f"{path} is not the object `toolchain triton emit` writes", fix)
    return meta


def find_tokenizer(tokenizer: Path | None, repo: Path | None, art: CellArtifacts | None) -> Path:
    if tokenizer:
        return tokenizer
    if repo:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2 as pb

        cfg = text_format.Parse((repo / "preprocessing" / "config.pbtxt").read_text(), pb.ModelConfig())
        tok = Path(cfg.parameters["tokenizer_dir"].string_value)
        # a relative tokenizer_dir is relative to the model's directory (relocatable repositories)
        return tok if tok.is_absolute() else (repo / "preprocessing" / tok).resolve()
    if art is not None:
        return art.tokenizer_dir()
    raise UserInputError(
        "the workload needs the deployment's tokenizer",
        "pass --tokenizer DIR, --repo DIR (an emitted repository) or --spec SPEC",
    )


def make_config(
    *,
    url: str,
    protocol: str,
    model: str,
    concurrency: str | None,
    rate: str | None,
    poisson: bool,
    requests: int,
    duration: float | None,
    warmup: int,
    input_tokens: str | None,
    output_tokens: str | None,
    shared: str | None,
    dataset_path: Path | None,
    tokenizer: Path | None,
    repo: Path | None,
    spec: Path | None,
    cell_id: str | None,
    metrics_url: str | None,
    stream: bool,
    seed: int,
    stop_on_error: bool,
    timeout: float,
    idle_timeout: float | None = None,
    num_draft_tokens: int | None = None,
    workers: int = 1,
    trace: Path | None = None,
    trace_speed: str | None = None,
    trace_block_tokens: int = 512,
) -> tuple[BenchConfig, Any]:
    """The BenchConfig the bench flags describe, and the spec's cell (None without ``spec``)."""
    from transformers import AutoTokenizer

    if protocol not in PROTOCOLS:
        raise UserInputError(f"unknown protocol {protocol!r}", f"use one of {', '.join(PROTOCOLS)}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise UserInputError(f"--workers must be from 1 to {MAX_WORKERS} processes, not {workers}", "e.g. --workers 4")
    entries = None
    if trace is not None:
        from toolchain.bench.trace import read_trace

        _trace_alone(concurrency, rate, dataset_path, shared)
        speeds = parse_list(trace_speed or "1", float)
        if trace_block_tokens < 1:
            raise UserInputError(f"--trace-block-tokens must be at least 1, not {trace_block_tokens}")
        entries = read_trace(trace)
        loads = [Load(trace=trace.name, speed=sp, duration_s=duration) for sp in speeds]
    elif trace_speed is not None:
        raise UserInputError("--trace-speed scales a --trace", "pass --trace FILE too, or drop --trace-speed")
    else:
        loads = _loads(concurrency, rate, poisson, duration)
    if requests < 1:
        raise UserInputError("--requests must be at least 1")
    if warmup < 0:
        raise UserInputError(f"--warmup must be 0 or more, not {warmup}", "pass --warmup 0 to measure every request")
    if not timeout > 0:  # also NaN
        raise UserInputError(f"--timeout must be a positive number of seconds, not {timeout}")
    if idle_timeout is not None and not 0 < idle_timeout < float("inf"):  # also NaN
        raise UserInputError(f"--idle-timeout must be a positive number of seconds, not {idle_timeout}")
    cell = None
    art: CellArtifacts | None = None
    prov: dict[str, Any] = {}
    slo: dict[str, float | None] = {}
    if spec:
        cell, art, slo, traffic = _from_spec(spec, cell_id)
        prov.update(art.identity(), gpu=cell.gpu.name)
        if traffic is not None:  # the spec's traffic shape, unless the flags say otherwise
            input_tokens = input_tokens or dist_text(traffic.input_tokens)
            output_tokens = output_tokens or dist_text(traffic.output_tokens)
    input_tokens, output_tokens = input_tokens or DEFAULT_INPUT, output_tokens or DEFAULT_OUTPUT
    if repo and (repo / "toolchain-repo.json").is_file():
        prov.update(_repo_provenance(repo / "toolchain-repo.json"))
    tok = AutoTokenizer.from_pretrained(find_tokenizer(tokenizer, repo, art))
    prov["workload"] = {
        "input_tokens": "dataset" if dataset_path else input_tokens,
        "output_tokens": output_tokens,
        "shared_prefix": shared,
    }
    if entries is not None:
        from toolchain.bench.trace import trace_requests

        replay = trace_requests(tok, entries, seed, trace_block_tokens)
        reqs = [replace(r, at=None) for r in replay[:warmup]] + replay  # warm-up: copies of the first requests
        prov["workload"] = {
            "trace": str(trace),
            "trace_requests": len(replay),
            "trace_span_s": replay[-1].at - (replay[0].at or 0.0) if replay[-1].at is not None else 0.0,
            "trace_block_tokens": trace_block_tokens,
            "input_tokens": f"trace mean {sum(r.prompt_tokens for r in replay) / len(replay):.0f}",
            "output_tokens": f"trace mean {sum(r.max_tokens for r in replay) / len(replay):.0f}",
        }
    else:
        reqs = _workload(tok, dataset_path, shared, input_tokens, output_tokens, seed, requests + warmup)
    if num_draft_tokens is not None:
        if num_draft_tokens < 1:
            raise UserInputError("--num-draft-tokens must be at least 1")
        reqs = [replace(r, num_draft_tokens=num_draft_tokens) for r in reqs]
        prov["workload"]["num_draft_tokens"] = num_draft_tokens
    cfg = BenchConfig(
        protocol=protocol.split("-")[0],
        url=url,
        model=model,
        loads=loads,
        requests=reqs,
        stream=stream,
        warmup=warmup,
        seed=seed,
        metrics_url=metrics_url,
        slo=slo,
        chat=protocol == "openai-chat",
        stop_on_error=stop_on_error,
        timeout=timeout,
        idle_timeout=idle_timeout,
        provenance=prov,
        workers=workers,
    )
    if workers > 1:
        prov["workers"] = workers
    return cfg, cell


MAX_WORKERS = 256


def _trace_alone(concurrency: str | None, rate: str | None, dataset_path: Path | None, shared: str | None) -> None:
    """A trace brings its own arrival times and prompts: the other load and workload flags cannot apply."""
    for flag, value in (
        ("--concurrency", concurrency),
        ("--rate", rate),
        ("--dataset", dataset_path),
        ("--shared-prefix", shared),
    ):
        if value:
            raise UserInputError(
                f"--trace brings its own arrival times and prompts; {flag} cannot be combined with it",
                f"drop {flag}, or drop --trace",
            )


def _loads(concurrency: str | None, rate: str | None, poisson: bool, duration: float | None) -> list[Load]:
    """The load points of --concurrency or --rate (one client at a time when neither is given)."""
    conc, rates = parse_list(concurrency, int), parse_list(rate, float)
    if conc and rates:
        raise UserInputError("choose --concurrency or --rate, not both")
    return (
        [Load(concurrency=c, duration_s=duration) for c in conc]
        or [Load(rate=r, poisson=poisson, duration_s=duration) for r in rates]
        or [Load(concurrency=1, duration_s=duration)]
    )


def _from_spec(spec: Path, cell_id: str | None) -> tuple[Cell, CellArtifacts, dict[str, float | None], Any]:
    """The spec's cell (the named one, else the first), its artifacts, its SLOs and its traffic shape (or None)."""
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.matrix import expand, find_cell

    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    cell = find_cell(s, cell_id) if cell_id else expand(s)[0]
    art = for_cell(cell)
    slo = {"ttft_ms": s.slo.ttft_ms.p99 or s.slo.ttft_ms.p50, "tpot_ms": s.slo.tpot_ms.p99 or s.slo.tpot_ms.p50}
    return cell, art, slo, s.traffic


def _repo_provenance(marker: Path) -> dict[str, Any]:
    """What an emitted repository's marker says about its origin: spec, cell, keys and reference note."""
    meta = _repo_meta(marker)
    prov = {k: meta.get(k) for k in ("spec", "cell", "engine_key", "profile_id") if meta.get(k)}
    prov["reference"] = meta.get("reference_note")
    return prov


def _workload(
    tok: Any,
    dataset_path: Path | None,
    shared: str | None,
    input_tokens: str,
    output_tokens: str,
    seed: int,
    n: int,
) -> list[Request]:
    """``n`` requests from the dataset, the shared-prefix shape (K:P:FRACTION) or the synthetic distributions."""
    out_d = Dist.parse(output_tokens)
    if dataset_path:
        return dataset(dataset_path, tok, out_d, seed, n)
    if shared:
        try:
            k, p, frac = shared.split(":")
            return shared_prefix(tok, n, int(k), int(p), float(frac), Dist.parse(input_tokens), out_d, seed)
        except ValueError as exc:
            raise UserInputError(f"cannot read --shared-prefix {shared!r}", "use K:P:FRACTION, e.g. 2:64:0.5") from exc
    return synthetic(tok, n, Dist.parse(input_tokens), out_d, seed)
