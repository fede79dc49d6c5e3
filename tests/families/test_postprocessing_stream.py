"""The ensemble's postprocessing model fed as the tensorrtllm backend streams: one token per response, each
response a request of its own carrying the ensemble request's id (issue 32, item 6). The text sent over the
responses must be the whole text, with no character broken into U+FFFD."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import REPO
from toolchain.quantize.tiny import make_tiny_checkpoint

TEXT = "café ާK 日本"  # 2-, 2- and 3-byte characters the tiny byte-level BPE splits over tokens


class _Tensor:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value

    def as_numpy(self) -> Any:
        return self.value


class _Response:
    def __init__(self, output_tensors: list[_Tensor] | None = None, error: Any = None) -> None:
        self.tensors, self.error = output_tensors or [], error


class _Request:
    def __init__(self, rid: str, ids: list[int]) -> None:
        self.rid = rid
        self.inputs = {
            "TOKENS_BATCH": np.array([[ids]], dtype=np.int32),
            "SEQUENCE_LENGTH": np.array([[len(ids)]], dtype=np.int32),
        }

    def request_id(self) -> str:
        return self.rid


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor  # type: ignore[attr-defined]
    pb.InferenceResponse = _Response  # type: ignore[attr-defined]
    pb.TritonError = str  # type: ignore[attr-defined]
    pb.get_input_tensor_by_name = lambda req, name: _Tensor(name, req.inputs[name])  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    path = REPO / "triton_repo" / "postprocessing" / "1" / "model.py"
    loader = importlib.machinery.SourceFileLoader("postprocessing_model", str(path))
    spec = importlib.util.spec_from_loader("postprocessing_model", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    ckpt = make_tiny_checkpoint(tmp_path / "tiny")
    m = mod.TritonPythonModel()
    cfg = {"parameters": {"tokenizer_dir": {"string_value": str(ckpt)}}}
    m.initialize({"model_config": json.dumps(cfg), "model_repository": str(tmp_path)})
    return m


def _text(resp: _Response) -> str:
    assert resp.error is None, resp.error
    return str(resp.tensors[0].value[0, 0])


def test_one_token_per_response_keeps_multibyte_characters_whole(model: Any) -> None:
    ids = model.tok.encode(TEXT, add_special_tokens=False)
    assert any("\ufffd" in model.tok.decode([i]) for i in ids)  # some character really is split over tokens
    pieces = [_text(model.execute([_Request("req-1", [i])])[0]) for i in ids]
    assert "".join(pieces) == TEXT
    assert not any("\ufffd" in p for p in pieces)


def test_interleaved_streams_keep_their_own_state(model: Any) -> None:
    a = model.tok.encode("café", add_special_tokens=False)
    b = model.tok.encode("日本語", add_special_tokens=False)
    got: dict[str, str] = {"a": "", "b": ""}
    for i in range(max(len(a), len(b))):
        reqs = [(k, ids[i]) for k, ids in (("a", a), ("b", b)) if i < len(ids)]
        resps = model.execute([_Request(k, [t]) for k, t in reqs])
        for (k, _), r in zip(reqs, resps, strict=True):
            got[k] += _text(r)
    assert got == {"a": "café", "b": "日本語"}


def test_a_request_without_id_is_decoded_on_its_own(model: Any) -> None:
    """The BLS sends every token so far in one request without an id: the whole text each time."""
    ids = model.tok.encode(TEXT, add_special_tokens=False)
    assert _text(model.execute([_Request("", ids)])[0]) == TEXT
    assert _text(model.execute([_Request("", ids)])[0]) == TEXT
