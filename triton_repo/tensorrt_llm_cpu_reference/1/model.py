"""CPU REFERENCE MODEL for the `tensorrt_llm` slot of an inflight_batcher_llm repository.

This is not TensorRT-LLM. It is a Python-backend model (PyTorch + transformers on CPU) that takes
and returns the same tensors as TensorRT-LLM's `tensorrtllm` C++ backend, so the same ensemble,
BLS, client and benchmark run on a machine without a GPU. Greedy decoding, one request at a time
(Triton queues the rest), token streaming in decoupled mode, stop words, end id, and a real
block-level prefix cache (KV of full `tokens_per_block` prefixes is kept and reused), reported
through the same per-request perf outputs and `nv_trt_llm_kv_cache_block_metrics` gauges.

When the served checkpoint (`hf_model_dir`, the quantized export dequantized to float32) carries the export's
scales (`runtime-numerics/`), each Linear's input and the KV cache are quantized as TensorRT-LLM quantizes
them, with the accuracy gate's own code (`toolchain.quantize.runtime`): runtime numerics (activation and KV
quantization). The toolchain must then be importable here; otherwise the model refuses to load.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer

PERF = (
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens",
)

# per-request perf outputs by name: nanosecond times and counters, acceptance_rate a fraction
Perf = dict[str, int | float]
# send(tokens, perf, error, final): tokens is None exactly when error is set
Send = Callable[[list[int] | None, Perf, str | None, bool], None]


def _resolve(args: dict[str, str], value: str) -> str:
    """A relative path in a parameter is relative to this model's directory (relocatable repositories)."""
    if not value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(args["model_repository"], value))


# A UTF-8 character is at most 4 bytes, so at most 4 byte-level tokens make one up.
MAX_CHAR_TOKENS = 4


def ends_mid_character(tok: Any, generated: list[int], pending: int) -> bool:
    """Whether the last ``pending`` generated tokens stop inside a multi-byte character (a byte-level BPE
    token can carry part of one: decoded alone it is U+FFFD); held back until the character is whole,
    for at most MAX_CHAR_TOKENS tokens (a byte sequence that never becomes a character is sent then)."""
    if tok is None or pending >= MAX_CHAR_TOKENS:
        return False
    tail = generated[-(pending + MAX_CHAR_TOKENS) :]
    text: str = tok.decode(tail, skip_special_tokens=False)
    return text.endswith("\ufffd")


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
            f"{weights} carries the export's runtime numerics (runtime-numerics/), which the CPU reference model "
            f"runs with the toolchain (toolchain.quantize.runtime), but the toolchain cannot be imported in this "
            f"Python backend ({e}); install the toolchain where the server's Python runs"
        ) from e
    return instrument_served(model, Path(weights))


def _opt(req: Any, name: str, default: Any = None) -> Any:
    t = pb_utils.get_input_tensor_by_name(req, name)
    return default if t is None else t.as_numpy().reshape(-1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.decoupled: bool = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.tpb = int(params.get("tokens_per_block", "32") or 32)
        self.reuse = params.get("enable_kv_cache_reuse", "true").lower() == "true"
        self.exclude_default = params.get("exclude_input_in_output", "false").lower() == "true"
        self.out_types = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in cfg["output"]}
        max_tokens = params.get("max_tokens_in_paged_kv_cache", "")
        self.max_blocks = int(max_tokens) // self.tpb if max_tokens.isdigit() else 4096
        torch.manual_seed(0)
        torch.set_num_threads(1)
        hf_dir = _resolve(args, params["hf_model_dir"])
        model: Any = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        self.model = model.eval()  # Any: transformers leaves PreTrainedModel.eval() unannotated
        self.numerics = runtime_numerics(self.model, hf_dir)
        # Streaming holds back a token that ends inside a multi-byte character (ends_mid_character): each
        # streamed response then decodes to whole characters. Without tokenizer files, tokens go one by one.
        self.tok: Any = None
        if any(os.path.isfile(os.path.join(hf_dir, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
            self.tok = AutoTokenizer.from_pretrained(hf_dir)
        self.prefix: OrderedDict[str, tuple[int, Any]] = OrderedDict()  # block-chain hash -> (n_tokens, cache)
        self.reused_total = 0
        self.active = 0
        labels = {"model": args["model_name"], "version": args["model_version"]}
        kv = pb_utils.MetricFamily(
            name="nv_trt_llm_kv_cache_block_metrics",
            description="KV cache block metrics (CPU reference model)",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        rq = pb_utils.MetricFamily(
            name="nv_trt_llm_request_metrics",
            description="Request metrics (CPU reference model)",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self._families = (kv, rq)  # a MetricFamily must outlive its Metrics
        self.g = {
            k: kv.Metric(labels={**labels, "kv_cache_block_type": k})
            for k in ("max", "free", "used", "tokens_per", "reused", "fraction")
        }
        self.r = {k: rq.Metric(labels={**labels, "request_type": k}) for k in ("active", "max", "scheduled")}
        self.r["max"].set(cfg.get("max_batch_size", 1))
        self.g["max"].set(self.max_blocks)
        self.g["tokens_per"].set(self.tpb)
        self._publish(0)
        pb_utils.Logger.log_info(
            f"tensorrt_llm: CPU REFERENCE MODEL (PyTorch), not TensorRT-LLM; serving {self.numerics}"
        )

    def _publish(self, active_blocks: int) -> None:
        used = active_blocks + sum(math.ceil(n / self.tpb) for n, _ in self.prefix.values())
        self.g["used"].set(used)
        self.g["free"].set(max(0, self.max_blocks - used))
        self.g["fraction"].set(used / self.max_blocks if self.max_blocks else 0.0)
        self.g["reused"].set(self.reused_total)

    @staticmethod
    def _key(ids: list[int]) -> str:
        return hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()

    def _lookup(self, ids: list[int]) -> tuple[int, Any]:
        """Longest cached full-block prefix that leaves at least one token to run."""
        if not self.reuse:
            return 0, None
        for blocks in range((len(ids) - 1) // self.tpb, 0, -1):
            hit = self.prefix.get(self._key(ids[: blocks * self.tpb]))
            if hit is not None:
                self.prefix.move_to_end(self._key(ids[: blocks * self.tpb]))
                return blocks, copy.deepcopy(hit[1])
        return 0, None

    def _remember(self, ids: list[int], cache: Any) -> None:
        blocks = len(ids) // self.tpb
        if not self.reuse or blocks == 0:
            return
        n = blocks * self.tpb
        snap = copy.deepcopy(cache)
        snap.crop(n)
        self.prefix[self._key(ids[:n])] = (n, snap)
        while self.prefix and sum(math.ceil(v[0] / self.tpb) for v in self.prefix.values()) > self.max_blocks // 2:
            self.prefix.popitem(last=False)

    def _response(self, tokens: list[int] | None, perf: Perf, error: str | None = None) -> Any:
        if error is not None:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
        assert tokens is not None, "send() passes tokens whenever it passes no error"
        t = self.out_types
        n = len(tokens)
        out = [
            pb_utils.Tensor("output_ids", np.array(tokens, dtype=t["output_ids"]).reshape(1, 1, n)),
            pb_utils.Tensor("sequence_length", np.array([[n]], dtype=t["sequence_length"])),
            pb_utils.Tensor("cum_log_probs", np.zeros([1, 1], dtype=t["cum_log_probs"])),
            pb_utils.Tensor("output_log_probs", np.zeros([1, 1, n], dtype=t["output_log_probs"])),
            pb_utils.Tensor("context_logits", np.zeros([1, 1, 1], dtype=t["context_logits"])),
            pb_utils.Tensor("generation_logits", np.zeros([1, 1, 1, 1], dtype=t["generation_logits"])),
            pb_utils.Tensor("batch_index", np.zeros([1, 1], dtype=t["batch_index"])),
            pb_utils.Tensor("sequence_index", np.zeros([1, 1], dtype=t["sequence_index"])),
        ]
        out += [pb_utils.Tensor(k, np.array([[perf.get(k, 0)]], dtype=t[k])) for k in PERF]
        return pb_utils.InferenceResponse(output_tensors=out)

    def _verify(
        self, ids: list[int], drafts: list[int], max_new: int, end_id: int, exclude: bool, arrival: int, send: Send
    ) -> None:
        """External draft tokens: the longest prefix of the drafts that the greedy target agrees with,
        plus the target's own next token (TensorRT-LLM's token-match acceptance), in one forward pass."""
        perf: Perf = {
            "arrival_time_ns": arrival,
            "first_scheduled_time_ns": time.time_ns(),
            "num_input_tokens": len(ids),
        }
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids + drafts])).logits[0]
        preds = torch.argmax(logits[len(ids) - 1 :], dim=-1).tolist()  # len(drafts) + 1 predictions
        accepted = 0
        while accepted < len(drafts) and preds[accepted] == drafts[accepted]:
            accepted += 1
        out = [*drafts[:accepted], preds[accepted]][:max_new]
        if end_id in out:
            out = out[: out.index(end_id) + 1]
        now = time.time_ns()
        perf.update(
            first_token_time_ns=now,
            last_token_time_ns=now,
            num_output_tokens=len(out),
            total_draft_tokens=len(drafts),
            total_accepted_draft_tokens=accepted,
            acceptance_rate=accepted / len(drafts),
        )
        send(out if exclude else ids + out, perf, None, True)

    def _generate(self, req: Any, arrival: int, send: Send) -> None:
        ids = _opt(req, "input_ids").astype(np.int64)
        n_in = int(_opt(req, "input_lengths")[0])
        ids = ids[:n_in].tolist()
        max_new = int(_opt(req, "request_output_len")[0])
        end_id = int(_opt(req, "end_id", [-1])[0])
        min_tokens = int(_opt(req, "min_tokens", [0])[0])
        streaming = bool(_opt(req, "streaming", [False])[0])
        exclude = bool(_opt(req, "exclude_input_in_output", [self.exclude_default])[0])
        stops: list[list[int]] = []
        sw = pb_utils.get_input_tensor_by_name(req, "stop_words_list")
        if sw is not None and sw.as_numpy().size:
            arr = sw.as_numpy().reshape(2, -1)
            start = 0
            for end in arr[1]:
                if end < 0:
                    break
                stops.append(arr[0][start:end].tolist())
                start = int(end)
        if streaming and not self.decoupled:
            send(None, {}, "Streaming is only supported if model is deployed using decoupled mode.", True)
            return
        if n_in == 0 or max_new <= 0:
            send(None, {}, "input_lengths and request_output_len must be positive", True)
            return
        drafts = _opt(req, "draft_input_ids")
        if drafts is not None and drafts.size:  # one speculative verify step (draft-target through the BLS)
            self._verify(ids, [int(t) for t in drafts.reshape(-1)], max_new, end_id, exclude, arrival, send)
            return
        perf: Perf = {"arrival_time_ns": arrival, "first_scheduled_time_ns": time.time_ns(), "num_input_tokens": n_in}
        reused, cache = self._lookup(ids)
        start = reused * self.tpb
        generated: list[int] = []
        pending: list[int] = []  # streamed tokens not sent yet (they end inside a character)
        with torch.no_grad():
            x = torch.tensor([ids[start:]])
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            self._remember(ids, cache)
            self.reused_total += reused
            logits = out.logits[0, -1]
            while len(generated) < max_new:
                tok = int(torch.argmax(logits))
                generated.append(tok)
                now = time.time_ns()
                perf.setdefault("first_token_time_ns", now)
                perf["last_token_time_ns"] = now
                total = n_in + len(generated)
                perf.update(
                    kv_cache_reused_blocks=reused,
                    kv_cache_alloc_total_blocks=math.ceil(total / self.tpb),
                    kv_cache_alloc_new_blocks=math.ceil(total / self.tpb) - reused,
                    num_output_tokens=len(generated),
                )
                self._publish(math.ceil(total / self.tpb))
                done = (
                    (tok == end_id and len(generated) >= min_tokens)
                    or len(generated) >= max_new
                    or any(s and generated[-len(s) :] == s for s in stops)
                )
                if getattr(req, "is_cancelled", None) and req.is_cancelled():
                    done = True
                if streaming:
                    pending.append(tok)
                    if done or not ends_mid_character(self.tok, generated, len(pending)):
                        send(pending, perf, None, done)
                        pending = []
                if done:
                    break
                out = self.model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                logits = out.logits[0, -1]
        self._publish(0)
        if not streaming:
            send(generated if exclude else ids + generated, perf, None, True)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        arrival = time.time_ns()
        if not self.decoupled:
            responses: list[Any] = []
            for req in requests:
                box: list[Any] = []

                def keep(
                    toks: list[int] | None, perf: Perf, err: str | None, final: bool, box: list[Any] = box
                ) -> None:
                    box.append(self._response(toks, perf, err))

                self._generate(req, arrival, keep)
                responses.append(box[-1])
            return responses
        for req in requests:
            sender = req.get_response_sender()
            self.active += 1
            self.r["active"].set(self.active)
            self.r["scheduled"].set(1)

            def send(toks: list[int] | None, perf: Perf, err: str | None, final: bool, sender: Any = sender) -> None:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
                sender.send(self._response(toks, perf, err), flags=flags)

            try:
                self._generate(req, arrival, send)
            except Exception as e:
                sender.send(
                    self._response(None, {}, f"CPU reference model: {e}"),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            finally:
                self.active -= 1
                self.r["active"].set(self.active)
                self.r["scheduled"].set(0)
        return None
