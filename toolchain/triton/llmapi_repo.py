"""Runtime pytorch: a Triton Python model over TensorRT-LLM's LLM API, in the layout of the upstream
``llmapi`` template (config.pbtxt + 1/model.yaml + 1/model.py; docs/upstream-trtllm-1.1.md).

model.yaml = the LLM-API options of the profile + ``model`` + ``triton_config``. ``model.py`` is
toolchain's own (``triton_repo/llmapi/1/model.py``, shipped with the package): it reads model.yaml,
resolves a relative ``model`` against its own directory and serves with the container's
``tensorrt_llm``. Nothing has to be copied by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from toolchain import yamlout
from toolchain.specs.llmapi import arg_model, arg_model_json, llmapi_options
from toolchain.specs.matrix import Cell

INPUTS = [
    ("text_input", "TYPE_STRING", [-1], False),
    ("streaming", "TYPE_BOOL", [1], True),
    ("sampling_param_best_of", "TYPE_INT32", [1], True),
    ("sampling_param_temperature", "TYPE_FP32", [1], True),
    ("sampling_param_top_k", "TYPE_INT32", [1], True),
    ("sampling_param_top_p", "TYPE_FP32", [1], True),
    ("sampling_param_frequency_penalty", "TYPE_FP32", [1], True),
    ("sampling_param_presence_penalty", "TYPE_FP32", [1], True),
    ("sampling_param_max_tokens", "TYPE_INT32", [1], True),
    ("sampling_param_stop", "TYPE_STRING", [-1], True),
    ("sampling_param_seed", "TYPE_UINT64", [1], True),
    ("sampling_param_exclude_input_from_output", "TYPE_BOOL", [1], True),
    ("sampling_param_return_perf_metrics", "TYPE_BOOL", [1], True),
    ("return_finish_reason", "TYPE_BOOL", [1], True),
    ("return_stop_reason", "TYPE_BOOL", [1], True),
    ("return_cumulative_logprob", "TYPE_BOOL", [1], True),
    ("stop", "TYPE_BOOL", [1], True),
]
OUTPUTS = [
    ("text_output", "TYPE_STRING", [-1]),
    ("finish_reason", "TYPE_STRING", [-1]),
    ("stop_reason", "TYPE_STRING", [-1]),
    ("cumulative_logprob", "TYPE_FP32", [-1]),
    ("kv_cache_reused_block", "TYPE_INT32", [-1]),
    ("kv_cache_missed_block", "TYPE_INT32", [-1]),
    ("kv_cache_alloc_new_blocks", "TYPE_INT32", [-1]),
    ("kv_cache_alloc_total_blocks", "TYPE_INT32", [-1]),
    ("kv_cache_hit_rate", "TYPE_FP32", [-1]),
    ("arrival_time_ns", "TYPE_INT64", [1]),
    ("first_scheduled_time_ns", "TYPE_INT64", [1]),
    ("first_token_time_ns", "TYPE_INT64", [1]),
    ("last_token_time_ns", "TYPE_INT64", [1]),
    ("acceptance_rate", "TYPE_FP32", [1]),
    ("total_accepted_draft_tokens", "TYPE_INT32", [1]),
    ("total_draft_tokens", "TYPE_INT32", [1]),
]


MODEL_REL = "model"  # the checkpoint's directory inside tensorrt_llm/1/, when it is copied in


def model_source() -> Path:
    from toolchain.triton.emit import model_sources

    return model_sources() / "llmapi" / "1" / "model.py"


STANDIN_WEIGHTS = "standin-weights"  # beside model.yaml: what the CPU stand-in runs (the export, dequantized)
STANDIN_NOTE = "CPU stand-in for TensorRT-LLM's LLM API (PyTorch + transformers), not TensorRT-LLM"


def standin_source() -> Path:
    from toolchain.triton.emit import model_sources

    return model_sources() / "llmapi_cpu_standin" / "1" / "model.py"


def llmapi_files(cell: Cell, model: str, revision: str | None = None, *, standin: bool = False) -> dict[str, str]:
    """Relative path -> text of the llmapi model (config.pbtxt built as a ModelConfig message).

    ``model``: what model.yaml names: a path relative to ``tensorrt_llm/1/``, an absolute path where
    the server runs, or a Hugging Face repo id (pinned to ``revision`` when given).
    ``standin``: the CPU stand-in serves it (no TensorRT-LLM here): config.pbtxt names it, and the target
    release's argument model is written beside model.yaml for the stand-in to refuse what the release refuses.
    """
    from toolchain._deps import require
    from toolchain.triton.emit import to_pbtxt

    pb = require("tritonclient.grpc.model_config_pb2", "triton")
    cfg = pb.ModelConfig(name="tensorrt_llm", backend="python", max_batch_size=0)
    # the server starts with --disable-auto-complete-config, so the policy is written here too
    cfg.model_transaction_policy.decoupled = cell.spec.serving.decoupled
    for name, dt, dims, opt in INPUTS:
        cfg.input.append(pb.ModelInput(name=name, data_type=pb.DataType.Value(dt), dims=dims, optional=opt))
    for name, dt, dims in OUTPUTS:
        cfg.output.append(pb.ModelOutput(name=name, data_type=pb.DataType.Value(dt), dims=dims))
    cfg.instance_group.append(pb.ModelInstanceGroup(count=1, kind=pb.ModelInstanceGroup.KIND_CPU))
    if standin:
        cfg.parameters["toolchain_reference"].string_value = STANDIN_NOTE
        cfg.parameters["standin_weights"].string_value = STANDIN_WEIGHTS
    if cell.spec.serving.gpu_device_ids:
        cfg.parameters["gpu_device_ids"].string_value = ";".join(
            ",".join(map(str, g)) for g in cell.spec.serving.gpu_device_ids
        )
    opts: dict[str, Any] = {"model": model, **llmapi_options(cell)}
    if revision:
        opts["revision"] = revision  # a hub id is pinned to the spec's revision (LLM API `revision`)
    opts["triton_config"] = {"max_batch_size": 0, "decoupled": cell.spec.serving.decoupled}
    readme = (
        "TensorRT-LLM LLM-API model for Triton's Python backend, emitted by toolchain.\n"
        "Serve it in NVIDIA's Triton container with TensorRT-LLM (the image provides tritonserver, the\n"
        "Python backend and the `tensorrt_llm` package); everything else is in this directory.\n"
    )
    files = {
        "tensorrt_llm/config.pbtxt": to_pbtxt(cfg),
        "tensorrt_llm/1/model.yaml": yamlout.dump(opts, sort_keys=False),
        "README.md": readme,
    }
    if standin:
        version = cell.spec.target.trtllm_version
        files["tensorrt_llm/1/llm_args.json"] = json.dumps(arg_model_json(arg_model(cell.spec), version), indent=2)
        files["README.md"] = (
            f"{STANDIN_NOTE.upper()}: tensorrt_llm/1/model.py is the toolchain's CPU stand-in, emitted where\n"
            "TensorRT-LLM's llmapi model.py goes because TensorRT-LLM is not installed here. model.yaml is what\n"
            "TensorRT-LLM would be started with; emit on a GPU host (or without the stand-in) to serve it for real.\n"
        )
    return files


START_LINE = re.compile(r"tensorrt_llm: ((?:warning: )?(?:warm|cold) start[^\n\"]*)")  # Triton quotes it


def start_from_log(log: Path) -> str | None:
    """What the llmapi model (TensorRT-LLM's or the stand-in) said it started with: the warm-start bundle's
    check, as it logged it in the server log (the last start in the log)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = START_LINE.findall(text)
    return found[-1].strip() if found else None
