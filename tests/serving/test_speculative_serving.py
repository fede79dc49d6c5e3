"""Draft-target end to end on a real Triton: the CPU reference model serves the target (the tiny Llama)
and the draft (a second tiny Llama: the target's weights plus noise) behind the BLS model, which drafts, verifies and
returns exactly the target's greedy text, with the draft counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serving.conftest import write_tiny_spec
from toolchain.triton import server as S

pytestmark = [pytest.mark.slow, pytest.mark.server]
PROMPT = "The quick brown fox jumps over the lazy dog"


def _perturbed_copy(src: Path, dst: Path, scale: float = 0.1) -> Path:
    """A second tiny model that agrees with the target on about half of its greedy tokens (every weight
    plus noise of ``scale`` × its own std), so verify steps both accept and reject drafts."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * p.std() * scale)
    model.save_pretrained(dst)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy2(f, dst / f.name)
    return dst


@pytest.fixture(scope="module")
def draft_repo(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import yaml

    from toolchain.artifacts.cell import for_cell
    from toolchain.pipeline.emit import emit_cell
    from toolchain.specs.loader import load_spec
    from toolchain.specs.matrix import expand

    tmp = tmp_path_factory.mktemp("spec-dt")
    draft = _perturbed_copy(tiny_checkpoint, tmp / "tiny-draft")
    path = write_tiny_spec(tmp / "tiny.yaml", tiny_checkpoint, streaming=False, decoupled=False)
    d = yaml.safe_load(path.read_text())
    d["speculative"] = {"mode": "draft_target", "max_draft_len": 4, "draft": {"source": str(draft)}}
    path.write_text(yaml.safe_dump(d))
    cell = expand(load_spec(path))[0]
    out = tmp / "repo"
    emit_cell(for_cell(cell), "reference", out)
    return out


@pytest.fixture(scope="module")
def served(draft_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S.Server]:
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(draft_repo, ports=ports, log_path=tmp_path_factory.mktemp("log") / "triton.log", ready_timeout=180)
    yield srv
    srv.stop()


def _infer(url: str, model: str, n: int, draft_tokens: int | None) -> dict[str, np.ndarray[Any, Any]]:
    import tritonclient.grpc as g

    def inp(name: str, arr: np.ndarray[Any, Any], dt: str) -> g.InferInput:
        i = g.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        return i

    inputs = [
        inp("text_input", np.array([[PROMPT]], dtype=object), "BYTES"),
        inp("max_tokens", np.array([[n]], dtype=np.int32), "INT32"),
        inp("return_perf_metrics", np.array([[True]], dtype=bool), "BOOL"),
    ]
    if draft_tokens is not None:
        inputs.append(inp("num_draft_tokens", np.array([[draft_tokens]], dtype=np.int32), "INT32"))
    names = ("text_output", "total_draft_tokens", "total_accepted_draft_tokens", "acceptance_rate")
    with g.InferenceServerClient(url) as c:
        r = c.infer(model, inputs, outputs=[g.InferRequestedOutput(x) for x in names], timeout=120)
    return {x: r.as_numpy(x) for x in names}


def test_repository_lints_clean(draft_repo: Path) -> None:
    from toolchain.triton.lint import lint_repository

    errors = [f for f in lint_repository(draft_repo) if f.severity == "error"]
    assert errors == []
    assert (draft_repo / "tensorrt_llm_draft" / "config.pbtxt").is_file()


def test_bls_drafts_and_verifies_to_the_targets_greedy_text(served: S.Server, tiny_checkpoint: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=tok.eos_token_id)[0, ids.shape[1] :]
    text = tok.decode(want.tolist(), skip_special_tokens=True)

    spec = _infer(served.grpc_url, "tensorrt_llm_bls", 12, draft_tokens=3)
    got = b"".join(spec["text_output"].reshape(-1)).decode()
    assert got == text  # speculative decoding never changes a greedy answer
    drafted = int(spec["total_draft_tokens"].reshape(-1)[0])
    accepted = int(spec["total_accepted_draft_tokens"].reshape(-1)[0])
    assert drafted > 0 and 0 < accepted < drafted  # the half-agreeing draft: some accepted, some rejected
    assert float(spec["acceptance_rate"].reshape(-1)[0]) == pytest.approx(accepted / drafted)

    plain = _infer(served.grpc_url, "ensemble", 12, draft_tokens=None)
    assert b"".join(plain["text_output"].reshape(-1)).decode() == text


def test_bench_reports_acceptance_from_the_draft_target_bls(served: S.Server, draft_repo: Path) -> None:
    from toolchain.bench.options import BenchOptions
    from toolchain.bench.run import run_bench
    from toolchain.bench.setup import make_config

    common: dict[str, Any] = {
        "url": served.grpc_url,
        "protocol": "triton",
        "concurrency": "1",
        "requests": 3,
        "warmup": 0,
        "input_tokens": "16",
        "output_tokens": "8",
        "repo": draft_repo,
        "stream": False,
        "stop_on_error": True,
        "timeout": 120.0,
    }
    opts = BenchOptions(model="tensorrt_llm_bls", num_draft_tokens=3, **common)
    work, _ = make_config(opts)
    sp = run_bench(opts, work).document()["runs"][0]["speculative"]
    assert sp is not None and sp["requests"] == 3 and sp["draft_tokens"] > 0
    assert 0.0 < sp["acceptance_rate"] < 1.0
    assert 1.0 < sp["tokens_per_step"] <= 4.0  # K = 3: at most 4 tokens per verify step
    print(f"tiny draft-target: acceptance {sp['acceptance_rate']:.2f}, {sp['tokens_per_step']} tokens/step")
    # the ensemble has no draft path: asking for drafts there is a one-line user error
    from toolchain.errors import BenchError

    opts2 = BenchOptions(model="ensemble", num_draft_tokens=3, **common)
    work2, _ = make_config(opts2)
    with pytest.raises(BenchError, match="takes no num_draft_tokens"):
        run_bench(opts2, work2)
