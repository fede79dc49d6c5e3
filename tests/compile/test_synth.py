"""Synthesised trtllm-build argument lists, for every precision x GPU class, against docs/trtllm-build.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPECS
from toolchain.compile.flags import FLAGS, REMOVED, check_args
from toolchain.compile.synth import expected_build_config, trtllm_build_args
from toolchain.specs.llmapi import llmapi_options, validate_options
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand
from toolchain.specs.models import EngineSpec
from toolchain.specs.resolve import resolve

BASE = load_spec(SPECS / "llama-3.1-8b-fp8.yaml")
CASES = [  # (weights, kv, gpu)
    ("bf16", "auto", "A100-80GB-SXM"),
    ("fp16", "auto", "A10G"),
    ("int8_sq", "auto", "A100-80GB-SXM"),
    ("int4_awq", "auto", "L4"),
    ("int8_wo", "auto", "A10G"),
    ("fp8", "fp8", "H100-SXM"),
    ("fp8", "auto", "L40S"),
    ("w4a8_awq", "fp8", "H200-SXM"),
    ("nvfp4", "fp8", "B200"),
    ("fp8", "fp8", "GB200"),
]


def _cell(weights: str, kv: str, gpu: str, **serving: Any) -> Cell:
    d = BASE.model_dump(mode="json")
    d["quantization"].update(weights=weights, kv_cache=kv)
    d["matrix"]["gpu"] = [gpu]
    d["serving"].update(serving)
    return expand(EngineSpec.model_validate(d))[0]


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(("weights", "kv", "gpu"), CASES)
def test_args_valid_against_flag_table(weights: str, kv: str, gpu: str, tmp_path: Path) -> None:
    cell = _cell(weights, kv, gpu)
    args = trtllm_build_args(cell, tmp_path / "ckpt", tmp_path / "out")
    assert args[0] == "trtllm-build" and check_args(args[1:]) == []
    assert not set(args) & set(REMOVED)
    assert "--opt_num_tokens" not in args
    for i, a in enumerate(args[1:], 1):
        if a.startswith("--") and FLAGS[a].choices == ("enable", "disable"):
            assert args[i + 1] in ("enable", "disable"), f"{a} without its value"
    assert _flag(args, "--gemm_plugin") == {"bf16": "auto", "fp16": "auto", "fp8": "disable", "nvfp4": "nvfp4"}.get(
        weights, "auto"
    )
    assert _flag(args, "--workers") == str(cell.world_size)
    assert _flag(args, "--kv_cache_type") == "paged" and _flag(args, "--multiple_profiles") == "enable"
    fp8_ctx = _flag(args, "--use_fp8_context_fmha") == "enable"
    assert fp8_ctx == (weights in ("fp8", "w4a8_awq", "nvfp4") and kv == "fp8" and cell.gpu.sm >= 89)
    assert _flag(args, "--use_paged_context_fmha") == "enable"


def test_paged_context_off_predicted_for_int8_kv_without_prefix_caching(tmp_path: Path) -> None:
    cell = _cell("int8_sq", "int8", "A100-80GB-SXM", enable_prefix_caching=False, enable_chunked_prefill=False)
    args = trtllm_build_args(cell, tmp_path, tmp_path)
    assert _flag(args, "--use_paged_context_fmha") == "disable"
    assert expected_build_config(cell)["plugin_config"]["use_paged_context_fmha"] is False


def test_max_num_tokens_clipped_like_trtllm() -> None:
    d = BASE.model_dump(mode="json")
    d["matrix"].update(max_batch_size=[1], max_seq_len=[512], max_input_len=[256])
    cell = expand(EngineSpec.model_validate(d))[0]
    assert resolve(cell).max_num_tokens == 512  # min(8192, 512 x 1)


def test_reduce_fusion_only_with_tp() -> None:
    spec = load_spec(SPECS / "llama-3.3-70b-fp8-h100.yaml")
    cell = expand(spec)[0]
    assert resolve(cell).reduce_fusion is True
    assert resolve(cell, "Qwen2ForCausalLM").reduce_fusion is False


@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_llmapi_options_follow_the_12_schema(cuda_graphs: bool) -> None:
    d = BASE.model_dump(mode="json")
    d["runtime"] = "pytorch"
    d["serving"]["cuda_graphs"]["enabled"] = cuda_graphs
    cell = expand(EngineSpec.model_validate(d))[0]
    opts = llmapi_options(cell)
    assert validate_options(opts) == []
    assert opts["kv_cache_config"]["enable_block_reuse"] is True
    assert opts["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    if cuda_graphs:
        assert opts["cuda_graph_config"] == {
            "enable_padding": True,
            "max_batch_size": 64,
            "batch_sizes": [1, 2, 4, 8, 16, 32, 64],
        }
    else:
        assert opts["cuda_graph_config"] is None
    assert validate_options({**opts, "use_cuda_graph": True}) == [
        "use_cuda_graph is refused by TensorRT-LLM 1.2: replaced by cuda_graph_config"
    ]


def test_check_args_catches_mistakes() -> None:
    assert check_args(["--tp_size", "2"]) == ["--tp_size was removed from trtllm-build"]
    assert check_args(["--use_paged_context_fmha"]) == ["--use_paged_context_fmha needs a value"]
    assert "not one of" in check_args(["--gemm_plugin", "fp4"])[0]
    assert check_args(["--multiple_profiles", "enable", "--opt_num_tokens", "8"])[-1].startswith("--opt_num_tokens")
