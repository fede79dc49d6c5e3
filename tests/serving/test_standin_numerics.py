"""The CPU stand-ins serve a quantized export with the accuracy gate's numerics (issue "Verdicts II"): the
LLM-API stand-in (`llmapi` repository) and the CPU reference model (engine path) quantize each Linear's input and
the KV cache with the export's scales, through `toolchain.quantize.runtime`, so their logits are the gate's, and a
corrupted `input_scale` changes what they serve (before, they ran the dequantized weights only, and it did not).

Both models are loaded in-process from emitted repositories with a fake `triton_python_backend_utils`."""

from __future__ import annotations

import importlib.machinery
import json
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_tiny_spec
from tests.serving.test_llmapi_standin import STANDIN_PY, _pytorch_spec
from toolchain.artifacts.cell import for_cell
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

pytestmark = pytest.mark.slow
REFERENCE_PY = STANDIN_PY.parents[2] / "tensorrt_llm_cpu_reference" / "1" / "model.py"
SERVED = "quantized export (fp8) dequantized to float32, with its runtime numerics (activation and KV quantization)"


def _load(path: Path, monkeypatch: pytest.MonkeyPatch, logged: list[str]) -> Any:
    """``path``'s TritonPythonModel module, with a fake triton_python_backend_utils (what initialize uses)."""
    import numpy as np

    class Metric:
        def __init__(self, labels: dict[str, str]) -> None:
            self.value = 0.0

        def set(self, v: float) -> None:
            self.value = v

    class MetricFamily:
        GAUGE = "gauge"

        def __init__(self, **kw: Any) -> None:
            pass

        def Metric(self, labels: dict[str, str]) -> Metric:
            return Metric(labels)

    pb = types.ModuleType("triton_python_backend_utils")
    pb.TritonModelException = RuntimeError  # type: ignore[attr-defined]
    pb.Logger = types.SimpleNamespace(log_info=logged.append, log_warn=logged.append)  # type: ignore[attr-defined]
    pb.using_decoupled_model_transaction_policy = lambda cfg: True  # type: ignore[attr-defined]
    pb.MetricFamily = MetricFamily  # type: ignore[attr-defined]
    pb.triton_string_to_numpy = lambda t: {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32}.get(t, np.int64)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    loader = importlib.machinery.SourceFileLoader(f"standin_{path.parent.parent.name}", str(path))
    mod = types.ModuleType(loader.name)
    loader.exec_module(mod)
    return mod


def _scaled_input_scales(src: Path, dest: Path, factor: float) -> int:
    """A copy of the quantized checkpoint ``src`` whose hf/ input_scale tensors are multiplied by ``factor``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest)
    changed = 0
    for f in (dest / "hf").glob("*.safetensors"):
        tensors = load_file(str(f))
        for name, t in tensors.items():
            if name.endswith(".input_scale"):
                tensors[name] = (t.float() * factor).to(t.dtype)
                changed += 1
        save_file(tensors, str(f), metadata={"format": "pt"})
    return changed


@pytest.fixture(scope="module")
def quantized(tiny_fp8: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny FP8 + FP8-KV checkpoint as quantize wrote it, and a copy with every input_scale ×1e-4."""
    bad = tmp_path_factory.mktemp("corrupt") / "q"
    assert _scaled_input_scales(tiny_fp8, bad, 1e-4) > 0
    return {"good": tiny_fp8, "bad": bad}


@pytest.fixture(scope="module")
def served(quantized: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What `triton emit` hands the stand-ins of each checkpoint (pipeline.emit.dequantized_export's copy)."""
    from toolchain.quantize.dequant import dequantized_checkpoint

    root = tmp_path_factory.mktemp("served")
    return {k: dequantized_checkpoint(q / "hf", root / k) for k, q in quantized.items()}


@pytest.fixture(scope="module")
def repos(
    served: dict[str, Path], tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Path]:
    """(layout, checkpoint) -> an emitted repository: the llmapi one (the LLM-API stand-in) and the engine
    path's one (the CPU reference model), each serving the good and the corrupted checkpoint."""
    from toolchain.triton.repository import emit_for_cell

    root = tmp_path_factory.mktemp("repos")
    llmapi = for_cell(expand(load_spec(_pytorch_spec(root, tiny_checkpoint)))[0])
    engine = for_cell(expand(load_spec(write_tiny_spec(root / "engine.yaml", tiny_checkpoint)))[0])
    out: dict[tuple[str, str], Path] = {}
    for k, w in served.items():
        out["llmapi", k] = root / f"llmapi-{k}"
        emit_for_cell(llmapi, "reference", out["llmapi", k], reference_weights=(w, SERVED), standin=True)
        out["engine", k] = root / f"engine-{k}"
        emit_for_cell(engine, "reference", out["engine", k], reference_weights=(w, SERVED))
    return out


def _start(layout: str, repo: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """The layout's stand-in model, initialized on ``repo`` as Triton would, and what it logged."""
    logged: list[str] = []
    if layout == "llmapi":
        mod = _load(STANDIN_PY, monkeypatch, logged)
        cfg = {"parameters": {"standin_weights": {"string_value": "standin-weights"}}}
        args = {"model_config": json.dumps(cfg), "model_repository": str(repo / "tensorrt_llm"), "model_version": "1"}
    else:
        from google.protobuf import json_format

        from toolchain.triton.lint import _parse

        mod = _load(REFERENCE_PY, monkeypatch, logged)
        parsed, bad = _parse(repo / "tensorrt_llm" / "config.pbtxt")
        assert parsed is not None, bad
        cfg = json_format.MessageToDict(parsed, preserving_proto_field_name=True)  # as Triton hands it over,
        cfg["parameters"] = {k: {"string_value": v.string_value} for k, v in parsed.parameters.items()}  # "" too
        args = {"model_config": json.dumps(cfg), "model_repository": str(repo / "tensorrt_llm"), "model_version": "1"}
    m = mod.TritonPythonModel()
    m.initialize({**args, "model_name": "tensorrt_llm"})
    return m, logged


def _logits(model: Any, batch: Any) -> Any:
    import torch

    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    return out.logits.float()


@pytest.fixture(scope="module")
def gate_logits(quantized: dict[str, Path], tiny_checkpoint: Path) -> tuple[Any, dict[str, Any]]:
    """The held-out batch, and the accuracy gate's logits of each checkpoint's hf/ (quantize.runtime)."""
    from transformers import AutoTokenizer

    from toolchain.quantize.accuracy import held_out_batch
    from toolchain.quantize.runtime import open_export, runtime_logits

    batch = held_out_batch(AutoTokenizer.from_pretrained(tiny_checkpoint))
    return batch, {
        k: runtime_logits(tiny_checkpoint, open_export(q / "hf", "cpu"), batch, "cpu") for k, q in quantized.items()
    }


@pytest.mark.parametrize("layout", ["llmapi", "engine"])
def test_the_standin_serves_the_gates_numerics_and_a_corrupted_input_scale_shows(
    monkeypatch: pytest.MonkeyPatch,
    repos: dict[tuple[str, str], Path],
    gate_logits: tuple[Any, dict[str, Any]],
    layout: str,
) -> None:
    import torch

    from toolchain.triton.lint import lint_repository

    batch, gate = gate_logits
    logits: dict[str, Any] = {}
    for k in ("good", "bad"):
        repo = repos[layout, k]
        assert [f for f in lint_repository(repo) if f.severity == "error"] == []
        assert (
            "runtime numerics (activation and KV quantization)"
            in json.loads((repo / "toolchain-repo.json").read_text())["reference_weights"]
        )
        m, logged = _start(layout, repo, monkeypatch)
        assert any(line.endswith("serving runtime numerics (activation and KV quantization)") for line in logged)
        logits[k] = _logits(m.model, batch)
    # the corrupted input scales change what is served (the dequantized weights alone are the same) ...
    assert not torch.allclose(logits["good"], logits["bad"], atol=1e-3)
    # ... as they change what the gate judges: the stand-in's logits are the gate's, bit for bit
    for k in ("good", "bad"):
        assert torch.equal(logits[k], gate[k]), f"{layout} stand-in on {k}: not the gate's logits"


@pytest.mark.parametrize("which", ["good", "bad"])
def test_the_llmapi_standins_greedy_tokens_are_the_gates(
    monkeypatch: pytest.MonkeyPatch,
    repos: dict[tuple[str, str], Path],
    quantized: dict[str, Path],
    tiny_checkpoint: Path,
    which: str,
) -> None:
    """Token by token through the stand-in's KV cache (K and V quantized when read) = the gate's forward run
    again over the whole sequence each step (no cache) on the export; with the corrupted input scales too (the
    dequantized weights alone give the good checkpoint's tokens there)."""
    import numpy as np
    import torch

    from toolchain.quantize.runtime import open_export, runtime_logits

    m, _ = _start("llmapi", repos["llmapi", which], monkeypatch)
    prompt, n = "The quick brown fox jumps over the lazy dog and", 8
    inputs = {"text_input": np.array([prompt.encode()], dtype=object), "sampling_param_max_tokens": np.array([n])}
    mod = sys.modules["triton_python_backend_utils"]
    mod.get_input_tensor_by_name = lambda req, name: (  # type: ignore[attr-defined]
        types.SimpleNamespace(as_numpy=lambda: inputs[name]) if name in inputs else None
    )
    mod.Tensor = lambda name, v: (name, v)  # type: ignore[attr-defined]
    mod.InferenceResponse = lambda output_tensors: dict(output_tensors)  # type: ignore[attr-defined]
    sent: list[str] = []
    m._generate(object(), lambda r, last: sent.append(r["text_output"][0].decode()))

    view = open_export(quantized[which] / "hf", "cpu")
    ids = m.tok(prompt)["input_ids"]
    greedy: list[int] = []
    for _ in range(n):
        seq = torch.tensor([ids + greedy])
        logits = runtime_logits(
            tiny_checkpoint, view, {"input_ids": seq, "attention_mask": torch.ones_like(seq)}, "cpu"
        )
        tok = int(torch.argmax(logits[0, -1]))
        if tok == m.eos:
            break
        greedy.append(tok)
    assert sent == [m.tok.decode(greedy, skip_special_tokens=True)]


@pytest.mark.parametrize("layout", ["llmapi", "engine"])
def test_a_standin_that_cannot_import_the_toolchain_refuses_to_load(
    monkeypatch: pytest.MonkeyPatch, repos: dict[tuple[str, str], Path], layout: str
) -> None:
    """Weights that carry runtime numerics are never served without them: no toolchain, no model."""
    monkeypatch.setitem(sys.modules, "toolchain.quantize.runtime", None)  # import raises ImportError
    with pytest.raises(RuntimeError, match=r"runtime numerics .*cannot be imported in this Python backend"):
        _start(layout, repos[layout, "good"], monkeypatch)


def test_a_dequantized_copy_made_before_the_scales_travelled_is_made_again(tiny_fp8: Path, tmp_path: Path) -> None:
    """A `<key>-dequantized/` an older toolchain wrote (pre-scale folded, no runtime-numerics/) for the same
    export digest is not reused: the stand-ins would serve it without the export's numerics."""
    from toolchain.quantize.dequant import STAMP, dequantized_checkpoint
    from toolchain.quantize.runtime import NUMERICS_DIR

    dest = dequantized_checkpoint(tiny_fp8 / "hf", tmp_path / "d", source_digest="sha256:x")
    shutil.rmtree(dest / NUMERICS_DIR)
    old = {"export": str(tiny_fp8 / "hf"), "export_digest": "sha256:x"}  # the stamp before this change
    (dest / STAMP).write_text(json.dumps(old, sort_keys=True))
    assert dequantized_checkpoint(tiny_fp8 / "hf", dest, source_digest="sha256:x") == dest
    assert (dest / NUMERICS_DIR / "scales.safetensors").is_file()
    # and a copy of this layout is reused as it is
    (dest / NUMERICS_DIR / "mark").write_text("")
    dequantized_checkpoint(tiny_fp8 / "hf", dest, source_digest="sha256:x")
    assert (dest / NUMERICS_DIR / "mark").is_file()
