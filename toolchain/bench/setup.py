"""Prepare what the bench options (toolchain.bench.options.BenchOptions) describe: the workload (tokenizer, requests,
SLOs, provenance and the served model) the run sends as the options say."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.artifacts.cell import CellArtifacts, for_cell
from toolchain.bench.options import PROTOCOLS as PROTOCOLS
from toolchain.bench.options import BenchOptions
from toolchain.bench.run import BenchWorkload
from toolchain.bench.workload import Dist, Request, RequestSource, dataset, shared_prefix_stream, synthetic_stream
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
    if repo and (repo / LLMAPI_YAML).is_file() and not (repo / "preprocessing").is_dir():
        return _llmapi_tokenizer(repo)
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


LLMAPI_YAML = Path("tensorrt_llm") / "1" / "model.yaml"  # an llmapi repository (runtime pytorch)


def _llmapi_tokenizer(repo: Path) -> Path:
    """An llmapi repository's tokenizer: the checkpoint its model.yaml names (the LLM API tokenizes with it)."""
    import yaml

    here = repo / LLMAPI_YAML.parent
    try:
        opts = yaml.safe_load((repo / LLMAPI_YAML).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise UserInputError(f"{repo / LLMAPI_YAML} is not readable YAML", "emit the repository again") from e
    model = opts.get("tokenizer") or opts.get("model") if isinstance(opts, dict) else None
    path = here / str(model) if model and not Path(str(model)).is_absolute() else Path(str(model or ""))
    if model and path.is_dir():
        return path.resolve()
    raise UserInputError(
        f"the llmapi model in {repo} names no local checkpoint ({model!r}) to take the tokenizer from",
        "pass --tokenizer DIR (the model's tokenizer)",
    )


def served_model(opts: BenchOptions) -> str:
    """The model to benchmark: --model, where the default (the ensemble) means the llmapi model of an llmapi
    repository given with --repo."""
    repo = opts.repo
    if opts.model == "ensemble" and repo is not None and (repo / LLMAPI_YAML).is_file():
        return "tensorrt_llm"
    return opts.model


def make_config(opts: BenchOptions) -> tuple[BenchWorkload, Any]:
    """The workload ``opts`` describe (their flags were checked when they were made), and the spec's cell (None
    without ``opts.spec``): reads the trace, the spec, the repository marker, the tokenizer and the prompts."""
    entries = None
    if opts.trace is not None:
        from toolchain.bench.trace import read_trace

        entries = read_trace(opts.trace)
    cell = None
    art: CellArtifacts | None = None
    prov: dict[str, Any] = {}
    slo: dict[str, float | None] = {}
    input_tokens, output_tokens = opts.input_tokens, opts.output_tokens
    if opts.spec:
        cell, art, slo, traffic = _from_spec(opts.spec, opts.cell)
        prov.update(art.identity(), gpu=cell.gpu.name)
        if traffic is not None:  # the spec's traffic shape, unless the flags say otherwise
            input_tokens = input_tokens or dist_text(traffic.input_tokens)
            output_tokens = output_tokens or dist_text(traffic.output_tokens)
    input_tokens, output_tokens = input_tokens or DEFAULT_INPUT, output_tokens or DEFAULT_OUTPUT
    repo = opts.repo
    if repo and (repo / "toolchain-repo.json").is_file():
        prov.update(_repo_provenance(repo / "toolchain-repo.json"))
        if not opts.spec:  # the emitted repository knows its spec's SLOs
            slo = _repo_slo(repo / "toolchain-repo.json")
    tok_dir = find_tokenizer(opts.tokenizer, repo, art)  # a missing file is said before seconds of importing
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    prov["workload"] = {
        "input_tokens": "dataset" if opts.dataset else input_tokens,
        "output_tokens": output_tokens,
        "shared_prefix": opts.shared_prefix,
    }
    if entries is not None:
        from toolchain.bench.trace import trace_requests

        replay = trace_requests(tok, entries, opts.seed, opts.trace_block_tokens)
        warm = opts.warmup
        reqs = [replace(r, at=None) for r in replay[:warm]] + replay  # warm-up: copies of the first requests
        prov["workload"] = {
            "trace": str(opts.trace),
            "trace_requests": len(replay),
            "trace_span_s": replay[-1].at - (replay[0].at or 0.0) if replay[-1].at is not None else 0.0,
            "trace_block_tokens": opts.trace_block_tokens,
            "input_tokens": f"trace mean {sum(r.prompt_tokens for r in replay) / len(replay):.0f}",
            "output_tokens": f"trace mean {sum(r.max_tokens for r in replay) / len(replay):.0f}",
        }
    more: Callable[[int], list[Request]] | None = None
    if entries is None:
        reqs, more = _workload(
            tok, opts.dataset, opts.shared_prefix, input_tokens, output_tokens, opts.seed, opts.requests + opts.warmup
        )
    if opts.protocol.startswith("openai"):
        stand_in = _stand_in(opts.url)
        if stand_in:  # a measurement of the stand-in sizes nothing (`plan --measured` refuses it)
            prov["reference"] = stand_in
    if opts.num_draft_tokens is not None:
        drafts = opts.num_draft_tokens
        reqs = [replace(r, num_draft_tokens=drafts) for r in reqs]
        if more is not None:
            grow = more

            def more_with_drafts(m: int) -> list[Request]:
                return [replace(r, num_draft_tokens=drafts) for r in grow(m)]

            more = more_with_drafts
        prov["workload"]["num_draft_tokens"] = drafts
    if opts.workers > 1:
        prov["workers"] = opts.workers
    work = BenchWorkload(served=served_model(opts), requests=reqs, slo=slo, provenance=prov, more=more)
    return work, cell


def _stand_in(url: str) -> str | None:
    """What serves at ``url`` when it is a stand-in, else None: the toolchain's stand-in says so in a header
    (toolchain.bench.standin); `dynamo up` records the mocker (toolchain.artifacts.standins). A server that cannot
    be asked is left to the load generator's own check, which names the problem."""
    from toolchain import http
    from toolchain.artifacts import standins
    from toolchain.bench.standin import HEADER

    recorded = standins.lookup(url)  # a stand-in behind a server that cannot say so (the Dynamo mocker)
    if recorded:
        return recorded
    resp = http.probe("GET", url.rstrip("/") + "/v1/models", timeout=5)
    value = resp.headers.get(HEADER) if resp is not None else None
    return str(value) if value else None


def _from_spec(spec: Path, cell_id: str | None) -> tuple[Cell, CellArtifacts, dict[str, float | None], Any]:
    """The spec's cell (the named one, else the first), its artifacts, its SLOs and its traffic shape (or None)."""
    from toolchain.specs.gate import checked_spec
    from toolchain.specs.matrix import expand, find_cell
    from toolchain.specs.slo import slo_targets

    s = checked_spec(spec)  # the rules `spec validate` applies (specs.gate)
    cell = find_cell(s, cell_id) if cell_id else expand(s)[0]
    art = for_cell(cell)
    return cell, art, slo_targets(s), s.traffic


def _repo_slo(marker: Path) -> dict[str, float | None]:
    """The SLO targets an emitted repository's marker records (none for one emitted before it recorded them)."""
    got = _repo_meta(marker).get("slo")
    if not isinstance(got, dict):
        return {}
    out: dict[str, float | None] = {}
    for k in ("ttft_ms", "tpot_ms"):
        v = got.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < float("inf")):
            raise UserInputError(
                f"{marker}: slo.{k} is not a positive number",
                "point --repo at a repository written by `toolchain triton emit`, or emit it again",
            )
        out[k] = float(v) if v is not None else None
    return out


def _repo_provenance(marker: Path) -> dict[str, Any]:
    """What an emitted repository's marker says about its origin: spec, cell, keys and reference note."""
    meta = _repo_meta(marker)
    prov = {k: meta.get(k) for k in ("spec", "cell", "engine_key", "profile_id") if meta.get(k)}
    prov["reference"] = meta.get("reference_note") or meta.get("stand_in")
    for k, v in prov.items():  # the result's provenance holds them as text (toolchain.bench.result.Provenance)
        if v is not None and not isinstance(v, str):
            raise UserInputError(
                f"{marker}: {'reference_note' if k == 'reference' else k} is not text",
                "point --repo at a repository written by `toolchain triton emit`, or emit it again",
            )
    return prov


def _workload(
    tok: Any,
    dataset_path: Path | None,
    shared: str | None,
    input_tokens: str,
    output_tokens: str,
    seed: int,
    n: int,
) -> tuple[list[Request], Callable[[int], list[Request]]]:
    """The first ``n`` requests from the dataset, the shared-prefix shape (K:P:FRACTION) or the synthetic
    distributions, and the function that gives the first N of the same sequence for any N (an SLO search's
    larger probes; a dataset holds no more prompts than its file)."""
    out_d = Dist.parse(output_tokens)
    if dataset_path:
        path = dataset_path
        return dataset(path, tok, out_d, seed, n), lambda m: dataset(path, tok, out_d, seed, m)
    if shared:
        try:
            k, p, frac = shared.split(":")
            stream = shared_prefix_stream(tok, int(k), int(p), float(frac), Dist.parse(input_tokens), out_d, seed)
        except ValueError as exc:
            raise UserInputError(f"cannot read --shared-prefix {shared!r}", "use K:P:FRACTION, e.g. 2:64:0.5") from exc
    else:
        stream = synthetic_stream(tok, Dist.parse(input_tokens), out_d, seed)
    source = RequestSource(stream)
    return source.first(n), source.first
