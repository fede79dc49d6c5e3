"""The tensor tables the shipped Python models (triton_repo/) carry are held equal to the ones the toolchain
emits configs from (toolchain/triton/tensors.py, toolchain/triton/llmapi_repo.py): a name renamed on one side
and not the other fails here, not in a server that refuses the request.

The models run inside Triton's Python stub, where the toolchain is not importable, so each keeps its own
table; this test reads those tables from the sources (ast), never by importing the models."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from toolchain.triton import tensors as T
from toolchain.triton.llmapi_repo import INPUTS as LLMAPI_INPUTS
from toolchain.triton.llmapi_repo import OUTPUTS as LLMAPI_OUTPUTS
from toolchain.triton.llmapi_repo import STANDIN_NOTE

MODELS = Path(__file__).resolve().parents[2] / "triton_repo"


def _constants(model: str) -> dict[str, Any]:
    """The module-level literal constants of a shipped model source."""
    tree = ast.parse((MODELS / model / "1" / "model.py").read_text())
    out: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            try:
                out[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return out


def _names(rows: list[Any]) -> set[str]:
    return {r[0] for r in rows}


def _string_args(model: str, call: str, index: int) -> set[str]:
    """The string literal at position ``index`` of every call to ``call`` (the tensor names a model reads with
    its helpers, or writes with ``pb_utils.Tensor``)."""
    tree = ast.parse((MODELS / model / "1" / "model.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) <= index:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        arg = node.args[index]
        if name == call and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.add(arg.value)
    return found


def test_the_bls_wiring_names_only_tensors_the_emitted_configs_declare() -> None:
    bls = _constants("tensorrt_llm_bls")
    llm_in, pre_in, pre_out = _names(T.TRTLLM_INPUTS), _names(T.PRE_INPUTS), _names(T.PRE_OUTPUTS)
    assert set(bls["TO_LLM"].keys()) <= _names(T.BLS_INPUTS)
    assert set(bls["TO_LLM"].values()) <= llm_in, set(bls["TO_LLM"].values()) - llm_in
    assert set(bls["TO_PRE"].keys()) <= _names(T.BLS_INPUTS) and set(bls["TO_PRE"].values()) <= pre_in
    assert set(bls["PRE_TO_LLM"].keys()) <= pre_out and set(bls["PRE_TO_LLM"].values()) <= llm_in
    assert set(bls["PASS"]) <= _names(T.TRTLLM_OUTPUTS), set(bls["PASS"]) - _names(T.TRTLLM_OUTPUTS)


def test_the_cpu_reference_writes_the_perf_outputs_the_configs_declare() -> None:
    perf = set(_constants("tensorrt_llm_cpu_reference")["PERF"])
    assert perf <= _names(T.TRTLLM_OUTPUTS), perf - _names(T.TRTLLM_OUTPUTS)


def test_the_llmapi_models_read_only_inputs_the_llmapi_config_declares() -> None:
    inputs = {name for name, *_ in LLMAPI_INPUTS}
    outputs = {name for name, *_ in LLMAPI_OUTPUTS}
    sampling = _constants("llmapi")["SAMPLING"]
    assert set(sampling) <= inputs, set(sampling) - inputs
    for model in ("llmapi", "llmapi_cpu_standin"):
        read = {n for f in ("_scalar", "_strings", "_text") for n in _string_args(model, f, 1)}
        assert read and read <= inputs, (model, read - inputs)
        written = _string_args(model, "Tensor", 0)
        assert written and written <= outputs, (model, written - outputs)


def test_the_standin_says_what_it_is_in_the_same_words_as_the_toolchain() -> None:
    assert _constants("llmapi_cpu_standin")["NOTE"] == STANDIN_NOTE
