"""The PyTorch runtime served here: the `llmapi` repository (one model: tokenization, generation and
streaming inside) with the toolchain's CPU stand-in for TensorRT-LLM's LLM API in the model's place,
loaded in the real Triton 2.51 and driven by the bench's client."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS
from toolchain.artifacts.cell import for_cell
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

STANDIN_PY = Path(__file__).resolve().parents[2] / "triton_repo" / "llmapi_cpu_standin" / "1" / "model.py"


def _pytorch_spec(tmp_path: Path, ckpt: Path, version: str = "1.2.1") -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["quantization"] = {"weights": "bf16", "kv_cache": "auto"}  # served as it is: no ModelOpt run needed here
    d["target"] = {"trtllm_version": version}
    d["matrix"]["max_batch_size"] = [2]
    d["serving"]["cuda_graphs"] = {"enabled": True, "batch_sizes": [1, 2]}
    p = tmp_path / "pt.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _emit(spec: Path, out: Path) -> dict[str, Any]:
    from toolchain.triton.repository import emit_for_cell

    return emit_for_cell(for_cell(expand(load_spec(spec))[0]), "reference", out, standin=True)


@pytest.mark.slow
@pytest.mark.server
def test_the_llmapi_repository_loads_in_triton_and_streams_through_the_standin(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from toolchain.triton import server as S
    from toolchain.triton.client import stream_generate
    from toolchain.triton.lint import lint_repository
    from toolchain.triton.llmapi_repo import start_from_log

    repo = tmp_path / "repo"
    res = _emit(_pytorch_spec(tmp_path, tiny_checkpoint), repo)
    assert res["layout"] == "llmapi" and res["reference"] is True
    # one model, as upstream's llmapi layout: no ensemble, no pre/postprocessing
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == ["tensorrt_llm"]
    here = repo / "tensorrt_llm" / "1"
    assert "CPU STAND-IN" in (here / "model.py").read_text()
    opts = yaml.safe_load((here / "model.yaml").read_text())
    assert opts["max_batch_size"] == 2 and opts["triton_config"]["decoupled"] is True and opts["model"] == "model"
    assert json.loads((here / "llm_args.json").read_text())["version"] == "1.2.1"
    assert "stand-in" in json.loads((repo / "toolchain-repo.json").read_text())["stand_in"]
    assert [f for f in lint_repository(repo) if f.severity == "error"] == []

    srv = S.start(repo, ports=S.Ports(S.free_port(), S.free_port(), S.free_port()), ready_timeout=300)
    try:
        prompt = "naïve café 日本 😀"
        streamed = stream_generate(srv.grpc_url, "tensorrt_llm", prompt, 24, llmapi=True)
        whole = stream_generate(srv.grpc_url, "tensorrt_llm", prompt, 24, stream=False, llmapi=True)
        assert streamed.error is None and whole.error is None
        assert len(streamed.chunks) > 1 and len(whole.chunks) == 1
        assert "".join(streamed.chunks) == whole.chunks[0]  # no piece decoded alone, nothing lost
        assert start_from_log(srv.log_path) == "cold start: no warm-start bundle"
    finally:
        srv.stop()


class _Tensor:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value


def _load_standin(monkeypatch: pytest.MonkeyPatch) -> Any:
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TritonModelException = RuntimeError  # type: ignore[attr-defined]
    pb.Logger = types.SimpleNamespace(log_info=lambda m: None, log_warn=lambda m: None)  # type: ignore[attr-defined]
    pb.using_decoupled_model_transaction_policy = lambda cfg: True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    loader = importlib.machinery.SourceFileLoader("llmapi_standin", str(STANDIN_PY))
    mod = types.ModuleType(loader.name)
    loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("version", "key", "why"),
    [
        ("1.3.0rc29", "sampler_type", "sampler_type: removed in the 1.3 line"),
        ("1.3.0rc29", "build_config", "build_config: removed with the TensorRT backend"),
        ("1.2.1", "max_batch_sizes", "max_batch_sizes: not an LLM argument"),
    ],
)
def test_the_standin_refuses_what_the_target_release_refuses(
    monkeypatch: pytest.MonkeyPatch, tiny_checkpoint: Path, tmp_path: Path, version: str, key: str, why: str
) -> None:
    repo = tmp_path / "repo"
    _emit(_pytorch_spec(tmp_path, tiny_checkpoint, version), repo)
    here = repo / "tensorrt_llm" / "1"
    opts = yaml.safe_load((here / "model.yaml").read_text())
    opts[key] = "auto"
    (here / "model.yaml").write_text(yaml.safe_dump(opts))
    mod = _load_standin(monkeypatch)
    cfg = json.loads(json.dumps({"parameters": {"standin_weights": {"string_value": "standin-weights"}}}))
    with pytest.raises(RuntimeError, match=f"TensorRT-LLM {version} refuses these LLM arguments: {why}"):
        mod.TritonPythonModel().initialize(
            {"model_config": json.dumps(cfg), "model_repository": str(repo / "tensorrt_llm"), "model_version": "1"}
        )


def test_the_standin_streams_whole_characters_only(monkeypatch: pytest.MonkeyPatch, tiny_checkpoint: Path) -> None:
    """A byte-level token can carry part of a character: each streamed piece is held until its characters
    are whole, so the pieces join to the text a non-streamed request gets (checked on a model that is made
    to emit the tokens of multi-byte text, which the random tiny model seldom does)."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    mod = _load_standin(monkeypatch)
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    text = "naïve café日本😀"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert any("\ufffd" in tok.decode([i]) for i in ids), "the tokenizer must split some character over tokens"

    class Model:
        def __init__(self) -> None:
            self.step = 0

        def __call__(self, input_ids: Any, past_key_values: Any = None, use_cache: bool = True) -> Any:
            logits = torch.zeros(1, 1, len(tok))
            logits[0, -1, ids[self.step] if self.step < len(ids) else tok.eos_token_id] = 1.0
            self.step += 1
            return types.SimpleNamespace(logits=logits, past_key_values=None)

    def run(streaming: bool) -> list[str]:
        m = mod.TritonPythonModel()
        m.tok, m.eos, m.model, m.max_seq_len, m.decoupled = tok, tok.eos_token_id, Model(), 0, True
        inputs = {
            "text_input": np.array([b"hi"], dtype=object),
            "streaming": np.array([streaming]),
            "sampling_param_max_tokens": np.array([len(ids) + 4], dtype=np.int32),
        }
        pieces: list[str] = []
        mod.pb_utils.get_input_tensor_by_name = lambda req, n: (
            types.SimpleNamespace(as_numpy=lambda: inputs[n]) if n in inputs else None
        )
        mod.pb_utils.Tensor = lambda n, v: (n, v)
        mod.pb_utils.InferenceResponse = lambda output_tensors: dict(output_tensors)
        m._generate(object(), lambda r, last: pieces.append(r["text_output"][0].decode("utf-8")))
        return pieces

    streamed, whole = run(True), run(False)
    assert whole == [text] and "".join(streamed) == text and len(streamed) > 1
    assert all("\ufffd" not in p for p in streamed)


def test_the_standin_serves_at_most_max_batch_size_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM's max_batch_size (the cell's) bounds the requests in flight; the rest wait their turn."""
    import threading
    import time

    mod = _load_standin(monkeypatch)
    mod.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    m = mod.TritonPythonModel()
    m.decoupled, m.max_batch = True, 2
    m._start_pool()
    running, peak, done = [0], [0], threading.Event()
    count = threading.Lock()

    def generate(req: Any, send: Any) -> None:
        with count:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with count:
            running[0] -= 1
        send("ok", True)

    m._generate = generate
    finished: list[int] = []

    def sent(r: Any, flags: int = 0) -> None:
        finished.append(1)
        if len(finished) == 5:
            done.set()

    class Req:
        def get_response_sender(self) -> Any:
            return types.SimpleNamespace(send=sent)

    assert m.execute([Req() for _ in range(5)]) is None
    assert done.wait(30)
    m.finalize()
    assert peak[0] == 2 and len(finished) == 5
