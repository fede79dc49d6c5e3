"""Lint agrees with the real Triton 2.51 (nvidia-pytriton wheel) on mutated emitted repositories.

Each mutation edits one thing of the emitted tiny repository. One tritonserver (explicit model control, on
127.0.0.1) serves a working copy; for each mutation the test writes it, asks Triton to load the entry models
(ensemble and tensorrt_llm_bls) and sends the standard request to each, then puts the files back. What Triton
does is recorded, and lint must agree: every mutation Triton refuses has a lint error naming the fix, and
every mutation Triton accepts lints without errors.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from toolchain.triton import server as S
from toolchain.triton.client import stream_generate
from toolchain.triton.lint import lint_repository
from toolchain.triton.loadcheck import precompile

pytestmark = pytest.mark.slow
ENTRY = ("ensemble", "tensorrt_llm_bls")


def _edit(repo: Path, model: str, change: Callable[[Any], None]) -> list[Path]:
    p = repo / model / "config.pbtxt"
    cfg = text_format.Parse(p.read_text(), pb.ModelConfig())
    change(cfg)
    p.write_text(text_format.MessageToString(cfg))
    return [p]


def _tensor(cfg: Any, name: str, output: bool = False) -> Any:
    return next(t for t in (cfg.output if output else cfg.input) if t.name == name)


def _set(**kw: Any) -> Callable[[Any], None]:
    def change(cfg: Any) -> None:
        for k, v in kw.items():
            setattr(cfg, k, v)

    return change


def _dtype(name: str, dtype: int, output: bool = False) -> Callable[[Any], None]:
    def change(cfg: Any) -> None:
        _tensor(cfg, name, output).data_type = dtype

    return change


def _dims(name: str, dims: list[int], output: bool = False) -> Callable[[Any], None]:
    def change(cfg: Any) -> None:
        t = _tensor(cfg, name, output)
        del t.dims[:]
        t.dims.extend(dims)

    return change


def _unmap(step_model: str, key: str) -> Callable[[Any], None]:
    def change(cfg: Any) -> None:
        step = next(s for s in cfg.ensemble_scheduling.step if s.model_name == step_model)
        del step.input_map[key]

    return change


def _delete(rel: str) -> Callable[[Path], list[Path]]:
    """Delete a file a model opens; its config.pbtxt is written again (same bytes) so that Triton, which
    reloads a model only when its config or version directory changes, loads it afresh as a restart would."""

    def mutate(repo: Path) -> list[Path]:
        (repo / rel).unlink()
        cfg = repo / Path(rel).parts[0] / "config.pbtxt"
        cfg.write_bytes(cfg.read_bytes())
        os.utime(cfg, (cfg.stat().st_atime, cfg.stat().st_mtime + 2))
        return [repo / rel, cfg]

    return mutate


@dataclass(frozen=True)
class Mutation:
    id: str
    mutate: Callable[[Path], list[Path]]
    refused: bool  # what the real Triton 2.51 does, as measured here (asserted, not assumed)
    fix: str = ""  # what lint's error must say (its message or its fix)


def _cfg(model: str, change: Callable[[Any], None]) -> Callable[[Path], list[Path]]:
    return lambda repo: _edit(repo, model, change)


MUTATIONS = [
    Mutation(
        "llm-max-batch-below-ensemble",
        _cfg("tensorrt_llm", _set(max_batch_size=4)),
        True,
        "set max_batch_size <= 4 here, or raise tensorrt_llm's to 8",
    ),
    Mutation(
        "ensemble-max-tokens-int64",
        _cfg("ensemble", _dtype("max_tokens", pb.TYPE_INT64)),
        True,
        "set ensemble input max_tokens data_type: TYPE_INT32",
    ),
    Mutation(
        "llm-request-output-len-int64",
        _cfg("tensorrt_llm", _dtype("request_output_len", pb.TYPE_INT64)),
        True,
        "set tensorrt_llm input request_output_len data_type: TYPE_INT32",
    ),
    Mutation(
        "bls-max-tokens-fp32",
        _cfg("tensorrt_llm_bls", _dtype("max_tokens", pb.TYPE_FP32)),
        True,
        "set data_type: TYPE_INT32",
    ),
    Mutation(
        "postprocessing-max-batch-negative",
        _cfg("postprocessing", _set(max_batch_size=-1)),
        True,
        "'max_batch_size' must be non-negative",
    ),
    Mutation(
        "tokenizer-json-deleted",
        _delete("preprocessing/tokenizer/tokenizer.json"),
        True,
        "copy the checkpoint's tokenizer.json there",
    ),
    Mutation(
        "ensemble-required-input-unmapped",
        _cfg("ensemble", _unmap("preprocessing", "QUERY")),
        True,
        'add input_map { key: "QUERY"',
    ),
    Mutation(
        "llm-output-ids-rank",
        _cfg("tensorrt_llm", _dims("output_ids", [-1], output=True)),
        True,
        "inconsistent shape",
    ),
    # accepted by Triton: lint must not fail them
    Mutation("ensemble-max-batch-below-models", _cfg("ensemble", _set(max_batch_size=4)), False),
    Mutation("postprocessing-max-batch-above-ensemble", _cfg("postprocessing", _set(max_batch_size=16)), False),
]


@pytest.fixture(scope="module")
def triton(reference_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S.Server, Path, set[str]]]:
    """The server, its repository, and the models whose files the last mutation touched (put back since)."""
    repo = tmp_path_factory.mktemp("mut") / "repo"
    shutil.copytree(reference_repo, repo)
    precompile(repo)  # as load_check does: a stub's __pycache__ would make the next ensemble load reload its models
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(
        repo,
        ports=ports,
        log_path=tmp_path_factory.mktemp("log") / "triton.log",
        ready_timeout=180,
        extra_args=["--model-control-mode=explicit"],
    )
    yield srv, repo, set()
    srv.stop()


def _triton_verdict(srv: S.Server, changed: set[str]) -> str | None:
    """None when Triton loads the changed models and both entry models and answers the standard request on each
    entry; else what it said. (Loading an ensemble does not reload a composing model whose files changed:
    each changed model is loaded by name first.)"""
    import tritonclient.http as h
    from tritonclient.utils import InferenceServerException

    client = h.InferenceServerClient(f"{srv.host}:{srv.ports.http}", network_timeout=300)
    try:
        for model in [*sorted(changed - set(ENTRY)), *ENTRY]:
            try:
                client.load_model(model)
            except InferenceServerException as e:
                return f"load {model}: {e.message()}"
        for model in ENTRY:
            res = stream_generate(srv.grpc_url, model, "hello there", 2, stream=False)
            if res.error is not None:
                return f"request {model}: {res.error}"
    finally:
        client.close()
    return None


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.id for m in MUTATIONS])
def test_lint_agrees_with_triton(triton: tuple[S.Server, Path, set[str]], m: Mutation) -> None:
    srv, repo, restored = triton
    assert _triton_verdict(srv, restored) is None, "the unmutated repository must load and answer"
    saved = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    touched = m.mutate(repo)
    try:
        said = _triton_verdict(srv, {p.relative_to(repo).parts[0] for p in touched})
        errors = [f.line() for f in lint_repository(repo) if f.severity == "error"]
    finally:
        for p in touched:
            p.write_bytes(saved[p])
            os.utime(p, (p.stat().st_atime, p.stat().st_mtime + 4))
        restored.update(p.relative_to(repo).parts[0] for p in touched)
    assert (said is not None) == m.refused, f"Triton 2.51: {said or 'loads and answers'}"
    if m.refused:
        assert any(m.fix in ln for ln in errors), f"Triton: {said}\nlint: {errors}"
    else:
        assert errors == [], errors
