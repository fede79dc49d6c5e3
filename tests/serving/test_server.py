"""A real Triton 2.51 (nvidia-pytriton wheel) on 127.0.0.1 serving the emitted repository."""

from __future__ import annotations

import glob
import json
import shutil
import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.errors import ServerError, UserInputError
from toolchain.triton import server as S
from toolchain.triton.client import stream_generate

pytestmark = [pytest.mark.slow, pytest.mark.server]
PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def served(reference_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S.Server]:
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(
        reference_repo, ports=ports, log_path=tmp_path_factory.mktemp("log") / "triton.log", ready_timeout=180
    )
    yield srv
    srv.stop()
    assert not glob.glob(f"/dev/shm/{srv.shm_prefix}*"), "shared-memory regions left behind"


@pytest.fixture(scope="module")
def greedy(tiny_checkpoint: Path) -> tuple[Any, Callable[[str, int], list[int]]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]

    def run(prompt: str, n: int) -> list[int]:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=tok.eos_token_id)
        return list(out[0, ids.shape[1] :].tolist())

    return tok, run


def test_streaming_through_ensemble_matches_transformers(served: S.Server, greedy: Any) -> None:
    tok, run = greedy
    want = run(PROMPT, 12)
    res = stream_generate(served.grpc_url, "ensemble", PROMPT, 12, stream=True)
    assert res.error is None
    # one streamed response per token, except that a token ending inside a multi-byte character waits for
    # the rest of it (at most 4 tokens, a UTF-8 character's longest), so no response splits a character
    groups: list[list[int]] = []
    pending: list[int] = []
    for i, t in enumerate(want):
        pending.append(t)
        tail = tok.decode(want[max(0, i + 1 - len(pending) - 4) : i + 1])
        if len(pending) >= 4 or i == len(want) - 1 or not tail.endswith("\ufffd"):
            groups.append(pending)
            pending = []
    assert res.chunks == [tok.decode(g, skip_special_tokens=True) for g in groups]
    assert res.perf["num_output_tokens"] == len(want)
    assert all(b >= a for a, b in zip(res.times, res.times[1:], strict=False))


def test_streaming_through_bls_sends_whole_characters(served: S.Server, greedy: Any) -> None:
    """The BLS decodes the stream as one sequence and sends what is new, so the pieces join to the text."""
    tok, run = greedy
    want = run(PROMPT, 12)
    res = stream_generate(served.grpc_url, "tensorrt_llm_bls", PROMPT, 12, stream=True)
    assert res.error is None
    assert "".join(res.chunks) == tok.decode(want, skip_special_tokens=True)


def test_non_streaming_through_bls_matches_transformers(served: S.Server, greedy: Any) -> None:
    tok, run = greedy
    want = run(PROMPT, 10)
    res = stream_generate(served.grpc_url, "tensorrt_llm_bls", PROMPT, 10, stream=False)
    assert res.error is None and len(res.chunks) == 1
    assert res.chunks[0] == tok.decode(want, skip_special_tokens=True)


def test_infer_names_the_cpu_stand_in_and_explains_replacement_characters(
    served: S.Server, greedy: Any, cli: Cli
) -> None:
    """On main `toolchain infer` against the CPU reference model printed its text (U+FFFD and all) as if it
    came from TensorRT-LLM."""
    tok, run = greedy
    r = cli("infer", PROMPT, "--url", served.grpc_url, "--max-tokens", "12")
    assert r.exit_code == 0, r.output
    assert "served by the CPU reference model (PyTorch + transformers), not TensorRT-LLM" in r.stderr, r.stderr
    text = tok.decode(run(PROMPT, 12), skip_special_tokens=True)
    assert r.stdout.rstrip("\n") == text
    assert ("no UTF-8 character" in r.stderr) == ("\ufffd" in text), r.stderr
    as_json = json.loads(cli("infer", PROMPT, "--url", served.grpc_url, "--max-tokens", "4", "--json").stdout)
    assert as_json["stand_in"].startswith("CPU reference model")


def test_prefix_cache_is_reused_and_reported(served: S.Server) -> None:
    long = " ".join([PROMPT] * 8)  # several full 32-token blocks
    first = stream_generate(served.grpc_url, "ensemble", long, 4)
    second = stream_generate(served.grpc_url, "ensemble", long, 4)
    assert (
        first.perf["kv_cache_reused_blocks"] == 0
        or first.perf["kv_cache_reused_blocks"] < second.perf["kv_cache_reused_blocks"]
    )
    assert second.perf["kv_cache_reused_blocks"] >= 2
    assert second.chunks == first.chunks  # reuse must not change the output
    text = urllib.request.urlopen(served.metrics_url, timeout=5).read().decode()
    assert 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused"' in text
    assert "nv_inference_request_success" in text


def test_ports_in_use_are_named(reference_repo: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(UserInputError, match=f"grpc port {busy} on 127.0.0.1 is already in use"):
            S.start(reference_repo, ports=S.Ports(S.free_port(), busy, S.free_port()))


def test_missing_stub_is_detected_before_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "tritonserver"
    (fake / "python_backend_stubs").mkdir(parents=True)
    with pytest.raises(ServerError, match="no Python backend stub for Python"):
        S.prepare_backends(fake)


def test_failed_model_is_named_with_log_tail(reference_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(reference_repo, repo)
    (repo / "postprocessing" / "1" / "model.py").write_text("raise RuntimeError('broken on purpose')\n")
    with pytest.raises(ServerError, match="postprocessing") as e:
        S.start(
            repo,
            ports=S.Ports(S.free_port(), S.free_port(), S.free_port()),
            log_path=tmp_path / "t.log",
            ready_timeout=120,
        )
    assert e.value.log_path == tmp_path / "t.log"


def test_non_decoupled_repository_moved_elsewhere_lints_clean_and_serves(
    tiny_checkpoint: Path, tmp_path: Path, greedy: Any
) -> None:
    """serving: {streaming: false, decoupled: false} (NVIDIA's templates allow it), emitted in one place and
    served from another: relative tokenizer and reference-model paths, no path of the first place."""
    from tests.serving.conftest import write_tiny_spec
    from toolchain.artifacts.cell import for_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand
    from toolchain.triton.lint import lint_repository
    from toolchain.triton.repository import emit_for_cell

    spec = write_tiny_spec(tmp_path / "s.yaml", tiny_checkpoint, streaming=False, decoupled=False)
    emit_for_cell(for_cell(expand(load_spec(spec))[0]), "reference", tmp_path / "a" / "repo")
    repo = tmp_path / "b" / "repo"
    shutil.move(tmp_path / "a", tmp_path / "b")
    assert [f.line() for f in lint_repository(repo) if f.severity == "error"] == []
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(repo, ports=ports, log_path=tmp_path / "triton.log", ready_timeout=180)
    try:
        tok, run = greedy
        want = run(PROMPT, 6)
        res = stream_generate(srv.grpc_url, "ensemble", PROMPT, 6, stream=False)
        assert res.error is None and len(res.chunks) == 1
        assert res.chunks[0] == tok.decode(want, skip_special_tokens=True)
    finally:
        srv.stop()
