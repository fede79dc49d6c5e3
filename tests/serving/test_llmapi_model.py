"""toolchain's LLM-API Triton model (triton_repo/llmapi/1/model.py) run in-process against stand-ins of
Triton's `triton_python_backend_utils` and of `tensorrt_llm`'s LLM API (neither exists on a CPU machine).
The stand-ins follow the documented call shapes: LLM(**kwargs), generate_async(prompt, params,
streaming=...) returning an async iterator / `aresult()`, outputs[0].text / text_diff / finish_reason."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

MODEL_PY = Path(__file__).resolve().parents[2] / "triton_repo" / "llmapi" / "1" / "model.py"


class _Tensor:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, np.asarray(value)

    def as_numpy(self) -> Any:
        return self.value


class _Response:
    def __init__(self, output_tensors: list[_Tensor] | None = None, error: Any = None) -> None:
        self.tensors = {t.name: t.value for t in output_tensors or []}
        self.error = error


class _Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[_Response | None, int]] = []
        self.done = threading.Event()

    def send(self, response: _Response | None = None, flags: int = 0) -> None:
        self.sent.append((response, flags))
        if flags:
            self.done.set()


class _Request:
    def __init__(self, **inputs: Any) -> None:
        self.inputs = {k: _Tensor(k, v) for k, v in inputs.items()}
        self.sender = _Sender()

    def get_response_sender(self) -> _Sender:
        return self.sender


def _pb_utils() -> types.ModuleType:
    m = types.ModuleType("triton_python_backend_utils")
    m.Tensor = _Tensor  # type: ignore[attr-defined]
    m.InferenceResponse = _Response  # type: ignore[attr-defined]
    m.TritonError = lambda msg: msg  # type: ignore[attr-defined]
    m.TritonModelException = RuntimeError  # type: ignore[attr-defined]
    m.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1  # type: ignore[attr-defined]
    m.Logger = types.SimpleNamespace(log_info=lambda msg: None, log_warn=lambda msg: None)  # type: ignore[attr-defined]
    m.get_input_tensor_by_name = lambda req, name: req.inputs.get(name)  # type: ignore[attr-defined]
    m.using_decoupled_model_transaction_policy = lambda cfg: cfg["model_transaction_policy"]["decoupled"]  # type: ignore[attr-defined]
    return m


class _Out:
    def __init__(self, text: str, diff: str, finish: str | None) -> None:
        self.text, self.text_diff, self.finish_reason = text, diff, finish


class _Result:
    def __init__(self, prompt: str, params: Any) -> None:
        n = params.kw.get("max_tokens", 3)
        self.words = [f"w{i}" for i in range(n)]

    def __aiter__(self) -> Any:
        async def gen() -> Any:
            for i, w in enumerate(self.words):
                last = i == len(self.words) - 1
                yield types.SimpleNamespace(
                    outputs=[_Out(" ".join(self.words[: i + 1]), w, "length" if last else None)]
                )

        return gen()

    async def aresult(self) -> Any:
        return types.SimpleNamespace(outputs=[_Out(" ".join(self.words), "", "length")])


def _tensorrt_llm(seen: dict[str, Any]) -> dict[str, types.ModuleType]:
    trt = types.ModuleType("tensorrt_llm")

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            seen["llm"] = kwargs

        def generate_async(self, prompt: str, params: Any, streaming: bool = False) -> _Result:
            seen.setdefault("calls", []).append((prompt, params.kw, streaming))
            return _Result(prompt, params)

        def shutdown(self) -> None:
            seen["shutdown"] = True

    class SamplingParams:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

    trt.LLM, trt.SamplingParams = LLM, SamplingParams  # type: ignore[attr-defined]
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    args = types.ModuleType("tensorrt_llm.llmapi.llm_args")
    args.update_llm_args_with_extra_dict = lambda base, extra: {**base, **extra}  # type: ignore[attr-defined]
    return {"tensorrt_llm": trt, "tensorrt_llm.llmapi": llmapi, "tensorrt_llm.llmapi.llm_args": args}


def _model(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    decoupled: bool,
    seen: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Any:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _pb_utils())
    for name, mod in _tensorrt_llm(seen).items():
        monkeypatch.setitem(sys.modules, name, mod)
    model_dir = tmp_path / "tensorrt_llm"
    (model_dir / "1" / "model").mkdir(parents=True)
    (model_dir / "1" / "model" / "config.json").write_text("{}")
    opts = {
        "model": "model",
        "backend": "pytorch",
        "max_batch_size": 8,
        "kv_cache_config": {"enable_block_reuse": True},
    }
    opts.update(extra or {})
    opts["triton_config"] = {"max_batch_size": 0, "decoupled": decoupled}
    (model_dir / "1" / "model.yaml").write_text(yaml.safe_dump(opts))
    loader = importlib.machinery.SourceFileLoader("llmapi_model", str(MODEL_PY))
    mod = types.ModuleType(loader.name)
    loader.exec_module(mod)
    m = mod.TritonPythonModel()
    cfg = {"model_transaction_policy": {"decoupled": decoupled}}
    m.initialize({"model_config": json.dumps(cfg), "model_repository": str(model_dir), "model_version": "1"})
    return m


def test_initialize_resolves_the_checkpoint_and_passes_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    m = _model(monkeypatch, tmp_path, False, seen)
    assert seen["llm"]["model"] == str(tmp_path / "tensorrt_llm" / "1" / "model")
    assert seen["llm"]["kv_cache_config"] == {"enable_block_reuse": True} and "triton_config" not in seen["llm"]
    m.finalize()
    assert seen["shutdown"]


def test_initialize_resolves_carried_draft_and_adapters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The repository carries the draft model and LoRA adapters beside model.yaml, named relatively; the
    LLM API gets them as paths inside the repository (a Hub id, or a name with no directory, stays as is)."""
    here = tmp_path / "tensorrt_llm" / "1"
    for rel in ("draft", "lora/0-sql"):
        (here / rel).mkdir(parents=True)
    extra = {
        "speculative_config": {"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "draft"},
        "lora_config": {"lora_dir": ["lora/0-sql", "org/floating"], "max_lora_rank": 8},
    }
    seen: dict[str, Any] = {}
    m = _model(monkeypatch, tmp_path, False, seen, extra)
    assert seen["llm"]["speculative_config"]["speculative_model"] == str(here / "draft")
    assert seen["llm"]["lora_config"]["lora_dir"] == [str(here / "lora" / "0-sql"), "org/floating"]
    m.finalize()


def test_non_decoupled_request_gets_one_response(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    m = _model(monkeypatch, tmp_path, False, seen)
    req = _Request(text_input=np.array([b"hello"], dtype=object), sampling_param_max_tokens=np.array([4]))
    (resp,) = m.execute([req])
    assert resp.error is None and resp.tensors["text_output"].tolist() == ["w0 w1 w2 w3"]
    assert seen["calls"] == [("hello", {"max_tokens": 4}, False)]
    streaming = _Request(text_input=np.array([b"hi"], dtype=object), streaming=np.array([True]))
    (refused,) = m.execute([streaming])
    assert "decoupled" in refused.error
    m.finalize()


def test_decoupled_streaming_sends_each_chunk_then_final(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    m = _model(monkeypatch, tmp_path, True, seen)
    req = _Request(
        text_input=np.array([b"hello"], dtype=object),
        streaming=np.array([True]),
        sampling_param_max_tokens=np.array([3]),
        sampling_param_stop=np.array([b"</s>"], dtype=object),
    )
    assert m.execute([req]) is None
    assert req.sender.done.wait(10)
    chunks = [r.tensors["text_output"].tolist()[0] for r, _ in req.sender.sent if r is not None]
    assert chunks == ["w0", "w1", "w2"] and req.sender.sent[-1] == (None, 1)
    assert seen["calls"][0][1] == {"max_tokens": 3, "stop": ["</s>"]}
    m.finalize()


def _bundle(here: Path, *, gpu: str, version: str, state: str = "warm") -> None:
    """A warm-start bundle beside model.yaml, as `toolchain triton emit` carries it (toolchain.artifacts.bundle)."""
    (here / "caches").mkdir(parents=True, exist_ok=True)
    (here / "caches" / "autotuner.cache").write_text("{}")
    shape = {"max_batch_size": 8, "max_seq_len": 256, "max_input_len": 128, "max_num_tokens": 1024, "tp": 1, "pp": 1}
    manifest = {
        "schema": 1,
        "kind": "llmapi-bundle",
        "state": state,
        "made_for": {"gpu": gpu, "trtllm_version": version, "shape": shape},
        "caches": ["caches/autotuner.cache"],
        "env": {"TLLM_AUTOTUNER_CACHE_PATH": "caches/autotuner.cache"} if state == "warm" else {},
    }
    (here / "bundle.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("gpu", "version", "warm"),
    [
        ("NVIDIA H100 80GB HBM3", "1.2.1", True),
        ("NVIDIA H200", "1.2.1", False),  # made for another GPU
        ("NVIDIA H100 80GB HBM3", "1.3.0rc29", False),  # made with another TensorRT-LLM
    ],
)
def test_a_bundle_reaches_the_runtime_only_on_the_gpu_and_version_it_was_made_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpu: str, version: str, warm: bool
) -> None:
    """TensorRT-LLM loads an autotuner file without checking its GPU or version; the model checks
    bundle.json first and starts cold, with one warning, on anything else."""
    here = tmp_path / "tensorrt_llm" / "1"
    _bundle(here, gpu=gpu, version=version)
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(get_device_name=lambda i=0: "NVIDIA H100 80GB HBM3")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setenv("TLLM_AUTOTUNER_CACHE_PATH", "unset")
    monkeypatch.delenv("TLLM_AUTOTUNER_CACHE_PATH")
    seen: dict[str, Any] = {}
    real = _tensorrt_llm

    def versioned(seen: dict[str, Any]) -> dict[str, types.ModuleType]:
        mods = real(seen)
        mods["tensorrt_llm"].__version__ = "1.2.1"  # type: ignore[attr-defined]
        return mods

    monkeypatch.setattr(sys.modules[__name__], "_tensorrt_llm", versioned)
    extra = {"max_seq_len": 256, "max_num_tokens": 1024, "tensor_parallel_size": 1}
    m = _model(monkeypatch, tmp_path, False, seen, extra)
    import os

    if warm:
        assert os.environ.get("TLLM_AUTOTUNER_CACHE_PATH") == str(here / "caches" / "autotuner.cache")
        assert m.start.startswith("warm start")
    else:
        assert "TLLM_AUTOTUNER_CACHE_PATH" not in os.environ
        assert m.start.startswith("warning: cold start") and ("made on" in m.start or "made with" in m.start)
    m.finalize()


def test_a_cold_bundle_starts_cold_without_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _bundle(tmp_path / "tensorrt_llm" / "1", gpu="NVIDIA H100 80GB HBM3", version="1.2.1", state="cold")
    seen: dict[str, Any] = {}
    m = _model(monkeypatch, tmp_path, False, seen)
    assert m.start == "cold start: the bundle holds no caches (made without a GPU)"
    m.finalize()
