"""The family matrix end to end on CPU: for each family, runtime and weight format the support table takes,
quantize with real ModelOpt (accuracy recorded), emit the Triton repository and lint it clean; the tiny
checkpoints are made here with each family's own Transformers class. What the table refuses is covered by
`spec validate` in test_family_rules.py."""

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
import yaml

from tests.conftest import REPO, SPECS
from toolchain.artifacts.cell import for_cell
from toolchain.pipeline.quantize import run_quantize
from toolchain.quantize.tiny import TINY, make_tiny_checkpoint
from toolchain.specs import families
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand
from toolchain.triton.lint import lint_repository
from toolchain.triton.repository import emit_for_cell

pytestmark = pytest.mark.slow
FAST = {"samples": 4, "seq_len": 16, "batch_size": 4}
# Formats that exercise both export paths (FP8 per-tensor, INT4 AWQ groups); KV cache left to the model dtype.
FORMATS = ("fp8", "int4_awq")
CASES = [
    (f, w)
    for f, fam in families.FAMILIES.items()
    for w in FORMATS
    if any(families.verdict(fam, r, w).ok for r in families.RUNTIMES)
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("family-ckpts")
    one_layer = {**TINY, "num_hidden_layers": 1}  # the matrix is many quantize runs: keep each one small
    return {f: make_tiny_checkpoint(root / f, family=f, sizes=one_layer) for f in {c[0] for c in CASES}}


def _spec(tmp: Path, ckpt: Path, runtime: str, weights: str) -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["runtime"] = runtime
    d["quantization"].update(weights=weights, kv_cache="auto", calibration={**FAST, "dataset": "builtin", "seed": 1})
    d["quantization"]["accuracy"] = {"max_rel_logit_error": 0.5, "min_top1_agreement": 0.5, "max_ppl_increase": 1.0}
    if runtime == "pytorch":
        d["target"] = {"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"}
    path = tmp / f"{runtime}.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_matrix_covers_every_family_some_runtime_takes() -> None:
    taken = {
        f
        for f, fam in families.FAMILIES.items()
        if any(families.verdict(fam, r, "fp8").ok for r in ("tensorrt", "pytorch"))
    }
    assert {c[0] for c in CASES} == taken
    assert {"llama", "qwen2", "gemma", "mixtral", "phi3", "qwen3_moe"} <= taken


@pytest.mark.parametrize(("family", "weights"), CASES)
def test_family_quantizes_emits_and_lints(
    checkpoints: dict[str, Path], tmp_path: Path, family: str, weights: str
) -> None:
    fam = families.FAMILIES[family]
    runtimes = [r for r in families.RUNTIMES if families.verdict(fam, r, weights).ok]
    first = _spec(tmp_path, checkpoints[family], runtimes[0], weights)
    [outcome] = run_quantize(first)
    m = outcome.result.manifest
    out = outcome.result.out
    # the accuracy figures are recorded and mean something (the gate passed in run_quantize)
    acc = m["accuracy"][m["accuracy"]["gate"]]
    assert 0 < acc["rel_logit_error"] < 0.5 and acc["top1_agreement"] >= 0.5, acc
    # a TensorRT-LLM checkpoint exactly where ModelOpt can write one; the unified HF checkpoint always
    assert (out / "trtllm" / "rank0.safetensors").is_file() == (fam.decoder_type is not None)
    assert (out / "hf" / "hf_quant_config.json").is_file() and (out / "hf" / "tokenizer.json").is_file()
    assert m["exports"] == (["hf", "trtllm"] if fam.decoder_type else ["hf"])
    if fam.decoder_type is None:
        assert any("no TensorRT-LLM checkpoint" in n for n in m["notes"])
    for runtime in runtimes:
        spec = _spec(tmp_path, checkpoints[family], runtime, weights)
        cell = expand(load_spec(spec))[0]
        repo = tmp_path / f"repo-{runtime}"
        emit_for_cell(for_cell(cell), "reference", repo)
        errors = [f.line() for f in lint_repository(repo) if f.severity == "error"]
        assert errors == [], (family, runtime, errors)


class _Tensor:
    def __init__(self, value: Any) -> None:
        self.value = np.asarray(value)

    def as_numpy(self) -> Any:
        return self.value


class _Metric:
    def set(self, value: float) -> None:
        del value


class _MetricFamily:
    GAUGE = "gauge"

    def __init__(self, **kw: Any) -> None:
        del kw

    def Metric(self, labels: dict[str, str]) -> _Metric:
        return _Metric()


def _pb_utils() -> types.ModuleType:
    m = types.ModuleType("triton_python_backend_utils")
    m.MetricFamily = _MetricFamily  # type: ignore[attr-defined]
    m.Logger = types.SimpleNamespace(log_info=lambda msg: None)  # type: ignore[attr-defined]
    m.using_decoupled_model_transaction_policy = lambda cfg: True  # type: ignore[attr-defined]
    m.triton_string_to_numpy = lambda t: {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32}.get(t, np.int64)  # type: ignore[attr-defined]
    m.get_input_tensor_by_name = lambda req, name: req.get(name)  # type: ignore[attr-defined]
    return m


SERVED = [
    f for f, fam in families.FAMILIES.items() if any(families.verdict(fam, r, "fp8").ok for r in families.RUNTIMES)
]


@pytest.mark.parametrize("family", SERVED)
def test_cpu_reference_streams_the_greedy_ids_of_transformers(
    checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    """The CPU reference model (what `serve` runs in the tensorrt_llm slot on a CPU) streams, for every family
    a runtime takes, the token ids of Transformers' float32 greedy generate."""
    import torch
    import transformers

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _pb_utils())
    path = REPO / "triton_repo" / "tensorrt_llm_cpu_reference" / "1" / "model.py"
    loader = importlib.machinery.SourceFileLoader(f"cpu_ref_{family}", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    ckpt = checkpoints[family]
    model = mod.TritonPythonModel()
    outputs = [
        {"name": n, "data_type": t} for n, t in (("output_ids", "TYPE_INT32"), ("sequence_length", "TYPE_INT32"))
    ]
    cfg = {"parameters": {"hf_model_dir": {"string_value": str(ckpt)}}, "output": outputs, "max_batch_size": 1}
    model.initialize(
        {"model_config": json.dumps(cfg), "model_repository": str(ckpt), "model_name": "m", "model_version": "1"}
    )
    tok = transformers.AutoTokenizer.from_pretrained(ckpt)
    prompt = tok("The quick brown fox", return_tensors="pt").input_ids
    n = 12
    req = {
        "input_ids": _Tensor(prompt[0].numpy()),
        "input_lengths": _Tensor([prompt.shape[1]]),
        "request_output_len": _Tensor([n]),
        "streaming": _Tensor([True]),
        "exclude_input_in_output": _Tensor([True]),
    }
    chunks: list[list[int]] = []
    model._generate(
        req, 0, lambda toks, perf, err, final: chunks.append(list(toks or [])) if err is None else pytest.fail(err)
    )
    hf = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        want = hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)[0, prompt.shape[1] :].tolist()
    assert [t for c in chunks for t in c] == want
    pieces = [str(tok.decode(c)) for c in chunks]
    assert "".join(pieces) == tok.decode(want) or "\ufffd" in tok.decode(want)
