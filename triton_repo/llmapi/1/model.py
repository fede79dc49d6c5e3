"""Triton Python model over TensorRT-LLM's LLM API (runtime `pytorch`), written for toolchain.

Reads `model.yaml` beside this file: `triton_config` configures this model, every other key goes to
`tensorrt_llm.LLM` (TensorRT-LLM turns the nested dicts into its config objects with
`update_llm_args_with_extra_dict`). A relative `model` is a directory relative to this file's
directory. Inputs and outputs follow the upstream `llmapi` template (text in, text out).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

if TYPE_CHECKING:
    from concurrent.futures import Future

SAMPLING = {
    "sampling_param_best_of": "best_of",
    "sampling_param_temperature": "temperature",
    "sampling_param_top_k": "top_k",
    "sampling_param_top_p": "top_p",
    "sampling_param_frequency_penalty": "frequency_penalty",
    "sampling_param_presence_penalty": "presence_penalty",
    "sampling_param_max_tokens": "max_tokens",
    "sampling_param_seed": "seed",
}

# send(response or None, last): hands one response (None: just the final flag) back to Triton
Send = Callable[[Any, bool], None]


def _scalar(req: Any, name: str) -> Any:
    t = pb_utils.get_input_tensor_by_name(req, name)
    if t is None:
        return None
    v = t.as_numpy().reshape(-1)[0]
    return v.item() if hasattr(v, "item") else v


def _strings(req: Any, name: str) -> list[str]:
    t = pb_utils.get_input_tensor_by_name(req, name)
    if t is None:
        return []
    return [s.decode() if isinstance(s, bytes) else str(s) for s in t.as_numpy().reshape(-1)]


def load_options(here: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(LLM keyword arguments, triton_config) from model.yaml. A relative path that names a directory
    beside this file (the checkpoint, a carried draft model or LoRA adapter) resolves against `here`;
    anything else (a Hugging Face repo id) is left as it is."""
    path = os.environ.get("LLM_CONFIG_PATH") or os.path.join(here, "model.yaml")
    with open(path) as f:
        opts = yaml.safe_load(f) or {}
    triton = opts.pop("triton_config", None) or {}

    def beside(value: Any) -> Any:
        if isinstance(value, str) and value and not os.path.isabs(value) and os.path.isdir(os.path.join(here, value)):
            return os.path.normpath(os.path.join(here, value))
        return value

    if "model" in opts:
        opts["model"] = beside(opts["model"])
    spec = opts.get("speculative_config")
    if isinstance(spec, dict) and "speculative_model" in spec:
        spec["speculative_model"] = beside(spec["speculative_model"])
    lora = opts.get("lora_config")
    if isinstance(lora, dict) and isinstance(lora.get("lora_dir"), list):
        lora["lora_dir"] = [beside(d) for d in lora["lora_dir"]]
    return opts, triton


BUNDLE_SHAPE = {  # the bundle's shape key -> the LLM argument that must match it
    "max_batch_size": "max_batch_size",
    "max_seq_len": "max_seq_len",
    "max_num_tokens": "max_num_tokens",
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
}


def _local_gpu() -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_name(0))
    except Exception:
        return None


def bundle_env(here: str, opts: dict[str, Any], version: str | None) -> tuple[dict[str, str], str]:
    """The warm-start bundle's cache variables (bundle.json beside model.yaml, written by toolchain), and one
    line saying what start this is. A bundle made for another GPU, TensorRT-LLM or shape is never handed
    to the runtime: TensorRT-LLM would load its autotuner file without checking either."""
    path = os.path.join(here, "bundle.json")
    if not os.path.isfile(path):
        return {}, "cold start: no warm-start bundle"
    with open(path) as f:
        m = json.load(f)
    if m.get("state") != "warm":
        return {}, "cold start: the bundle holds no caches (made without a GPU)"
    made = m.get("made_for") or {}
    wrong = []
    gpu = _local_gpu()
    if made.get("gpu") != gpu:
        wrong.append(f"made on {made.get('gpu')}, this GPU is {gpu}")
    if made.get("trtllm_version") != version:
        wrong.append(f"made with TensorRT-LLM {made.get('trtllm_version')}, this is {version}")
    shape = made.get("shape") or {}
    for key, arg in BUNDLE_SHAPE.items():
        if arg in opts and shape.get(key) != opts[arg]:
            wrong.append(f"made for {arg} {shape.get(key)}, model.yaml says {opts[arg]}")
    if wrong:
        return {}, "warning: cold start, the bundle's caches are not used: " + "; ".join(wrong)
    env = {k: os.path.join(here, v) for k, v in (m.get("env") or {}).items() if os.path.exists(os.path.join(here, v))}
    return env, "warm start: the bundle's autotuner and compile caches are handed to TensorRT-LLM"


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import tensorrt_llm
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict

        cfg = json.loads(args["model_config"])
        here = os.path.join(args["model_repository"], args["model_version"])
        opts, triton = load_options(here)
        self.decoupled: bool = pb_utils.using_decoupled_model_transaction_policy(cfg)
        if bool(triton.get("decoupled", self.decoupled)) != self.decoupled:
            raise pb_utils.TritonModelException("model.yaml triton_config.decoupled disagrees with config.pbtxt")
        env, start = bundle_env(here, opts, getattr(tensorrt_llm, "__version__", None))
        os.environ.update(env)  # before the LLM starts: its autotuner and compilers read them then
        (pb_utils.Logger.log_warn if start.startswith("warning") else pb_utils.Logger.log_info)(
            f"tensorrt_llm: {start}"
        )
        self.start = start
        model = opts.pop("model")
        kwargs = update_llm_args_with_extra_dict({"model": model}, opts)
        self.llm = LLM(**kwargs)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _sampling(self, req: Any) -> Any:
        from tensorrt_llm import SamplingParams

        kw: dict[str, Any] = {}
        for name, key in SAMPLING.items():
            v = _scalar(req, name)
            if v is not None:
                kw[key] = v
        stop = [s for s in _strings(req, "sampling_param_stop") if s]
        if stop:
            kw["stop"] = stop
        return SamplingParams(**kw)

    @staticmethod
    def _response(text: str, finish: str | None = None) -> Any:
        tensors = [pb_utils.Tensor("text_output", np.array([text], dtype=object))]
        if finish is not None:
            tensors.append(pb_utils.Tensor("finish_reason", np.array([str(finish)], dtype=object)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    async def _run(self, req: Any, send: Send) -> None:
        prompt = _strings(req, "text_input")[0]
        streaming = bool(_scalar(req, "streaming"))
        if streaming and not self.decoupled:
            raise pb_utils.TritonModelException("Streaming is only supported in decoupled mode.")
        result = self.llm.generate_async(prompt, self._sampling(req), streaming=streaming)
        if streaming:
            async for out in result:
                c = out.outputs[0]
                send(self._response(c.text_diff, c.finish_reason), False)
            send(None, True)
        else:
            out = await result.aresult()
            c = out.outputs[0]
            send(self._response(c.text, c.finish_reason), True)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            responses: list[Any] = []
            for req in requests:
                box: list[Any] = []

                def keep(r: Any, last: bool, box: list[Any] = box) -> None:
                    box.append(r)

                try:
                    fut = asyncio.run_coroutine_threadsafe(self._run(req, keep), self.loop)
                    fut.result()
                    responses.append(box[-1])
                except Exception as e:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"llmapi: {e}")))
            return responses
        for req in requests:
            sender = req.get_response_sender()

            def send(resp: Any, last: bool, sender: Any = sender) -> None:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
                if resp is None:
                    sender.send(flags=flags)
                else:
                    sender.send(resp, flags=flags)

            def failed(fut: Future[None], sender: Any = sender) -> None:
                if fut.exception() is not None:
                    sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(f"llmapi: {fut.exception()}")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )

            asyncio.run_coroutine_threadsafe(self._run(req, send), self.loop).add_done_callback(failed)
        return None

    def finalize(self) -> None:
        self.llm.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
