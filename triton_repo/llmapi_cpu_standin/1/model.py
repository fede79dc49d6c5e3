"""CPU STAND-IN for TensorRT-LLM's LLM API in the `tensorrt_llm` slot of an `llmapi` repository.

This is not TensorRT-LLM. On a machine without a GPU (and so without `tensorrt_llm`), the toolchain
emits this Python-backend model where TensorRT-LLM's own `llmapi` model.py would go, so the same
repository layout, `model.yaml`, inputs, outputs, client and benchmark run here. It:

- reads `model.yaml` (or the file `LLM_CONFIG_PATH` names) as the llmapi model.py does: `triton_config`
  configures this model, every other key is an `LLM(**kwargs)` argument;
- refuses what the target TensorRT-LLM release refuses: the keys are checked against that release's
  argument model, written beside this file (`llm_args.json`) by the toolchain;
- runs the weights the toolchain gives it (`standin_weights`: the quantized export dequantized to
  float32) with PyTorch + transformers, greedy; when they carry the export's scales (`runtime-numerics/`),
  each Linear's input and the KV cache are quantized as TensorRT-LLM quantizes them, with the accuracy
  gate's own code (`toolchain.quantize.runtime`): runtime numerics (activation and KV quantization);
- serves at most `max_batch_size` requests at once (the LLM argument, the cell's batch), the rest wait;
- streams text pieces (`text_output`) in decoupled mode, never splitting a multi-byte character.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

NOTE = "CPU stand-in for TensorRT-LLM's LLM API (PyTorch + transformers), not TensorRT-LLM"
DEFAULT_MAX_TOKENS = 32  # SamplingParams.max_tokens when the request gives none (the LLM API's default)


def _scalar(req: Any, name: str) -> Any:
    t = pb_utils.get_input_tensor_by_name(req, name)
    if t is None:
        return None
    v = t.as_numpy().reshape(-1)[0]
    return v.item() if hasattr(v, "item") else v


def _text(req: Any, name: str) -> str | None:
    t = pb_utils.get_input_tensor_by_name(req, name)
    if t is None or not t.as_numpy().size:
        return None
    v = t.as_numpy().reshape(-1)[0]
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def load_options(here: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(LLM keyword arguments, triton_config) from model.yaml, as TensorRT-LLM's llmapi model.py reads it."""
    path = os.environ.get("LLM_CONFIG_PATH") or os.path.join(here, "model.yaml")
    with open(path) as f:
        opts = yaml.safe_load(f) or {}
    if not isinstance(opts, dict):
        raise pb_utils.TritonModelException(f"{path} is not a mapping of LLM arguments")
    triton = opts.pop("triton_config", None) or {}
    return opts, triton


def refused(opts: dict[str, Any], model: dict[str, Any]) -> list[str]:
    """What the target release's argument model refuses of ``opts`` (unknown keys at every level it
    checks, removed keys with upstream's reason)."""
    out: list[str] = []
    for k in opts:
        if k in model["removed"]:
            out.append(f"{k}: {model['removed'][k]}")
        elif k not in model["top"]:
            out.append(f"{k}: not an LLM argument")
    for name, allowed in model["nested"].items():
        value = opts.get(name)
        if isinstance(value, dict):
            out += [f"{name}.{k}: not a {name} field" for k in value if k not in allowed]
    return out


def runtime_numerics(model: Any, weights: str) -> str:
    """Give ``model`` (loaded from ``weights``) the export's activation and KV-cache quantization when the
    weights carry its scales (``runtime-numerics/``), with the accuracy gate's code; what it then serves."""
    if not os.path.isdir(os.path.join(weights, "runtime-numerics")):
        return "weights as stored (no quantization scales carried: float32 activations and KV cache)"
    try:
        from pathlib import Path

        from toolchain.quantize.runtime import instrument_served
    except ImportError as e:  # never serve other numerics than the weights were made for, silently
        raise pb_utils.TritonModelException(
            f"{weights} carries the export's runtime numerics (runtime-numerics/), which this stand-in runs with "
            f"the toolchain (toolchain.quantize.runtime), but the toolchain cannot be imported in this Python "
            f"backend ({e}); install the toolchain where the server's Python runs"
        ) from e
    return instrument_served(model, Path(weights))


def bundle_start(here: str) -> str:
    """What TensorRT-LLM's llmapi model would hand the runtime of the bundle beside model.yaml, said as it
    says it. The stand-in has no GPU, so a warm bundle (made on one) is refused: a cold start."""
    path = os.path.join(here, "bundle.json")
    if not os.path.isfile(path):
        return "cold start: no warm-start bundle"
    with open(path) as f:
        m = json.load(f)
    if m.get("state") != "warm":
        return "cold start: the bundle holds no caches (made without a GPU)"
    gpu = (m.get("made_for") or {}).get("gpu")
    return f"warning: cold start, the bundle's caches are not used: made on {gpu}, this is the CPU stand-in (no GPU)"


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        here = os.path.join(args["model_repository"], args["model_version"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.decoupled: bool = pb_utils.using_decoupled_model_transaction_policy(cfg)
        opts, triton = load_options(here)
        if bool(triton.get("decoupled", self.decoupled)) != self.decoupled:
            raise pb_utils.TritonModelException("model.yaml triton_config.decoupled disagrees with config.pbtxt")
        with open(os.path.join(here, "llm_args.json")) as f:
            args_model = json.load(f)
        bad = refused(opts, args_model)
        if bad:
            raise pb_utils.TritonModelException(
                f"TensorRT-LLM {args_model['version']} refuses these LLM arguments: {'; '.join(bad)}"
            )
        if "model" not in opts:
            raise pb_utils.TritonModelException("model.yaml names no model")
        self.max_batch = max(1, int(opts.get("max_batch_size") or 1))
        self.max_seq_len = int(opts.get("max_seq_len") or 0)
        weights = os.path.normpath(os.path.join(here, params["standin_weights"]))
        torch.manual_seed(0)
        torch.set_num_threads(1)
        model: Any = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
        self.model = model.eval()  # Any: transformers leaves PreTrainedModel.eval() unannotated
        self.numerics = runtime_numerics(self.model, weights)
        self.tok: Any = AutoTokenizer.from_pretrained(weights)
        self.eos = self.tok.eos_token_id
        self._start_pool()
        pb_utils.Logger.log_info(f"tensorrt_llm: {NOTE}; max_batch_size {self.max_batch}; serving {self.numerics}")
        pb_utils.Logger.log_info(f"tensorrt_llm: {bundle_start(here)}")

    def _start_pool(self) -> None:
        """At most ``max_batch_size`` requests generate at once (the LLM's batch); the rest wait in the queue."""
        self.pool = ThreadPoolExecutor(max_workers=self.max_batch, thread_name_prefix="standin")
        self.lock = threading.Lock()
        self.active = 0

    @staticmethod
    def _response(text: str, finish: str | None = None) -> Any:
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object))]
        if finish is not None:
            tensors.append(pb_utils.Tensor("finish_reason", np.array([finish.encode()], dtype=object)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _generate(self, req: Any, send: Any) -> None:
        prompt = _text(req, "text_input")
        if prompt is None:
            raise ValueError("text_input is required")
        streaming = bool(_scalar(req, "streaming") or False)
        if streaming and not self.decoupled:
            raise ValueError("Streaming is only supported in decoupled mode.")
        max_tokens = _scalar(req, "sampling_param_max_tokens")
        max_new = DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens)
        if max_new <= 0:
            raise ValueError("sampling_param_max_tokens must be positive")
        stop = _text(req, "sampling_param_stop")
        ids = self.tok(prompt)["input_ids"]
        if self.max_seq_len and len(ids) + max_new > self.max_seq_len:
            raise ValueError(
                f"the prompt's {len(ids)} tokens plus max_tokens {max_new} exceed max_seq_len {self.max_seq_len}"
            )
        generated: list[int] = []
        sent = ""  # text already streamed: each response carries what is new since (text_diff)
        text = ""  # the output so far, cut at a stop string
        finish = "length"
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids]), use_cache=True)
            while True:
                tok = int(torch.argmax(out.logits[0, -1]))
                if tok == self.eos:
                    finish = "stop"
                    break
                generated.append(tok)
                text = self.tok.decode(generated, skip_special_tokens=True)
                if stop and stop in text:
                    text, finish = text[: text.index(stop)], "stop"
                    break
                # a piece that ends inside a character (a byte-level token) waits for the rest of it
                if streaming and not text.endswith("\ufffd") and text[len(sent) :]:
                    send(self._response(text[len(sent) :]), False)
                    sent = text
                if len(generated) >= max_new or (getattr(req, "is_cancelled", None) and req.is_cancelled()):
                    break
                out = self.model(input_ids=torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
        if streaming:
            send(self._response(text[len(sent) :], finish), True)
        else:
            send(self._response(text, finish), True)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            responses: list[Any] = []
            for req in requests:
                box: list[Any] = []
                try:
                    self._generate(req, lambda r, last, box=box: box.append(r))
                    responses.append(box[-1])
                except Exception as e:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"llmapi stand-in: {e}")))
            return responses
        for req in requests:
            sender = req.get_response_sender()

            def send(resp: Any, last: bool, sender: Any = sender) -> None:
                sender.send(resp, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)

            def run(req: Any = req, send: Any = send, sender: Any = sender) -> None:
                with self.lock:
                    self.active += 1
                try:
                    self._generate(req, send)
                except Exception as e:
                    sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(f"llmapi stand-in: {e}")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                finally:
                    with self.lock:
                        self.active -= 1

            self.pool.submit(run)  # at most max_batch_size run at once; the rest wait in the pool's queue
        return None

    def finalize(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
