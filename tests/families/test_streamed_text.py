"""Tied heads and fused experts in the streamed accuracy check; streamed text that keeps multi-byte
characters whole (CPU reference model, BLS, client)."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import REPO

# Thaana letter (2 bytes in UTF-8) followed by ASCII: the tiny byte-level BPE never saw it, so it is
# two byte tokens that decode to U+FFFD one at a time.
TEXT = "ާK"


@pytest.fixture
def ckpts(family_checkpoints: dict[str, Path]) -> dict[str, Path]:
    return family_checkpoints  # qwen2, gemma, mixtral and qwen2_moe among them


@pytest.mark.parametrize("family", ["qwen2", "gemma", "mixtral", "qwen2_moe"])
def test_streamed_pass_equals_transformers_for_tied_heads_and_fused_experts(
    ckpts: dict[str, Path], family: str
) -> None:
    """Qwen2 and Gemma store no lm_head.weight (tied); Transformers 5 fuses the MoE experts the checkpoint
    stores one by one. The streamed pass must read both exactly as Transformers' own loading does."""
    import torch
    import transformers

    from toolchain.quantize.accuracy import CheckpointTensors, held_out_batch, streamed_logits

    d = ckpts[family]
    batch = held_out_batch(transformers.AutoTokenizer.from_pretrained(d))
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        want = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    got = streamed_logits(d, CheckpointTensors(d, "cpu"), batch, "cpu")
    assert torch.equal(got, want)


def _load(path: Path, name: str) -> types.ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture
def stub_pb_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))


def _split_ids(ckpt: Path) -> tuple[Any, list[int]]:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(ckpt)
    ids = tok.encode(TEXT, add_special_tokens=False)
    assert len(ids) >= 3 and "\ufffd" in tok.decode(ids[:1])  # the character really is split over tokens
    return tok, ids


def test_cpu_reference_holds_back_a_token_that_ends_mid_character(stub_pb_utils: None, ckpts: dict[str, Path]) -> None:
    mod = _load(REPO / "triton_repo" / "tensorrt_llm_cpu_reference" / "1" / "model.py", "cpu_ref_model")
    tok, ids = _split_ids(ckpts["qwen2"])
    # the streaming loop of _generate: a token is sent once what is pending ends on a whole character
    sent: list[list[int]] = []
    pending: list[int] = []
    for i, t in enumerate(ids):
        pending.append(t)
        if not mod.ends_mid_character(tok, ids[: i + 1], len(pending)):
            sent.append(pending)
            pending = []
    assert pending == [] and [t for p in sent for t in p] == ids
    pieces = [tok.decode(p) for p in sent]
    assert "".join(pieces) == TEXT and not any("\ufffd" in p for p in pieces), pieces
    assert len(sent) < len(ids)  # the two byte tokens went out together
    # a byte that never becomes a character is not held for ever
    assert not mod.ends_mid_character(tok, ids[:1] * 8, mod.MAX_CHAR_TOKENS)
    assert not mod.ends_mid_character(None, ids[:1], 1)  # no tokenizer: token by token, as before


def test_bls_stream_sends_whole_characters(stub_pb_utils: None, ckpts: dict[str, Path]) -> None:
    mod = _load(REPO / "triton_repo" / "tensorrt_llm_bls" / "1" / "model.py", "bls_model")
    tok, ids = _split_ids(ckpts["qwen2"])
    sent, pieces = 0, []
    for i in range(len(ids)):  # one response per token, decoded as one sequence so far
        piece, sent = mod.whole_text(tok.decode(ids[: i + 1]), sent, final=False)
        pieces.append(piece)
    rest, sent = mod.whole_text(tok.decode(ids), sent, final=True)
    assert "".join([*pieces, rest]) == TEXT
    assert not any("\ufffd" in p for p in pieces), pieces
    # at the end, bytes that never became a character are sent as the decoder renders them
    tail, _ = mod.whole_text("a\ufffd", 1, final=True)
    assert tail == "\ufffd"


class _Result:
    def __init__(self, text: bytes | None, final: bool) -> None:
        self.text, self.final = text, final

    def as_numpy(self, name: str) -> Any:
        if name == "text_output" and self.text is not None:
            return np.array([[self.text]], dtype=object)
        return None

    def get_response(self) -> Any:
        param = types.SimpleNamespace(bool_param=self.final)
        return types.SimpleNamespace(parameters={"triton_final_response": param})


class _Client:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def stream_infer(self, gen: Any, stream_timeout: float) -> Any:
        async for _ in gen:
            break
        for c in self.chunks:
            yield _Result(c, False), None
        yield _Result(None, True), None


def test_client_decodes_utf8_across_streamed_pieces() -> None:
    """A server that sends the bytes of one character in two responses: the client prints it once, whole."""
    from toolchain.bench.loadgen import TritonTarget
    from toolchain.bench.metrics import RequestRecord
    from toolchain.bench.workload import Request

    raw = TEXT.encode()
    seen: list[str] = []

    async def go() -> None:  # the gRPC aio client wants a running loop (an earlier test may have closed the default)
        target = TritonTarget("127.0.0.1:1", "ensemble", True, 5.0)
        target.client = _Client([raw[:1], raw[1:2], raw[2:]])
        target.inputs = {"text_input", "max_tokens", "stream"}
        target.outputs = ["text_output"]
        target.on_text = seen.append
        await target.one(Request("x", 0, 4), RequestRecord(0, 0, 4, 0.0))

    asyncio.run(go())
    assert "".join(seen) == TEXT and not any("\ufffd" in s for s in seen), seen
