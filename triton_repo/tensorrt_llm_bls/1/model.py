"""Triton BLS model: preprocessing -> tensorrt_llm -> postprocessing in one model (toolchain).

Streams text chunks when this model is decoupled and the request sets `stream`; otherwise returns
the whole text. Perf outputs of the tensorrt_llm model are passed through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import triton_python_backend_utils as pb_utils

if TYPE_CHECKING:
    import numpy.typing as npt

# BLS input -> tensorrt_llm input (the wiring of the upstream ensemble template)
TO_LLM = {
    "exclude_input_in_output": "exclude_input_in_output",
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "temperature": "temperature",
    "length_penalty": "len_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "return_perf_metrics": "return_perf_metrics",
    "return_num_input_tokens": "return_num_input_tokens",
    "return_num_output_tokens": "return_num_output_tokens",
    "num_return_sequences": "num_return_sequences",
    "beam_width": "beam_width",
    "stream": "streaming",
}
TO_PRE = {
    "text_input": "QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
}
PRE_TO_LLM = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "STOP_WORDS_IDS": "stop_words_list",
    "BAD_WORDS_IDS": "bad_words_list",
    "EMBEDDING_BIAS": "embedding_bias",
}
PASS = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
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


SPEC_COUNTERS = ("total_draft_tokens", "total_accepted_draft_tokens")

# send(response, final): hands one InferenceResponse back (to the caller's list, or to the response sender)
Send = Callable[[Any, bool], None]


def whole_text(text: str, sent: int, final: bool) -> tuple[str, int]:
    """The new text of a streamed sequence decoded so far (``text``) after the ``sent`` characters already
    sent, without a trailing U+FFFD (the bytes of a multi-byte character split over tokens), which waits for
    the next token unless ``final``; returns (piece, characters sent now)."""
    end = len(text) if final else len(text.rstrip("\ufffd"))
    end = max(end, sent)
    return text[sent:end], end


def _as_str(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _get(resp: Any, name: str) -> Any:
    t = pb_utils.get_output_tensor_by_name(resp, name)
    return None if t is None else t.as_numpy()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.decoupled: bool = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.llm = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.draft = params.get("tensorrt_llm_draft_model_name") or ""
        self.accumulate = params.get("accumulate_tokens", "false").lower() == "true"

    def _call(self, model: str, inputs: list[Any], outputs: list[str], decoupled: bool = False) -> Any:
        req = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        return req.exec(decoupled=decoupled)

    def _detok(self, tokens: npt.NDArray[Any], lengths: npt.NDArray[Any]) -> Any:
        resp = self._call(
            "postprocessing",
            [pb_utils.Tensor("TOKENS_BATCH", tokens), pb_utils.Tensor("SEQUENCE_LENGTH", lengths)],
            ["OUTPUT"],
        )
        if resp.has_error():
            raise RuntimeError(resp.error().message())
        return _get(resp, "OUTPUT")

    def _handle(self, req: Any, send: Send) -> Any:
        pre_in: list[Any] = []
        for src, dst in TO_PRE.items():
            t = pb_utils.get_input_tensor_by_name(req, src)
            if t is not None:
                pre_in.append(pb_utils.Tensor(dst, t.as_numpy()))
        pre = self._call("preprocessing", pre_in, list(PRE_TO_LLM))
        if pre.has_error():
            raise RuntimeError(pre.error().message())
        nd = pb_utils.get_input_tensor_by_name(req, "num_draft_tokens")
        if nd is not None and int(nd.as_numpy().reshape(-1)[0]) > 0:
            if not self.draft:
                raise RuntimeError("num_draft_tokens needs a draft-target repository (tensorrt_llm_draft_model_name)")
            return self._speculate(req, pre, send)
        llm_in = [pb_utils.Tensor(dst, _get(pre, src)) for src, dst in PRE_TO_LLM.items()]
        for src, dst in TO_LLM.items():
            t = pb_utils.get_input_tensor_by_name(req, src)
            if t is not None:
                llm_in.append(pb_utils.Tensor(dst, t.as_numpy()))
        st = pb_utils.get_input_tensor_by_name(req, "stream")
        streaming = bool(st.as_numpy().reshape(-1)[0]) if st is not None else False
        if streaming and not self.decoupled:
            raise RuntimeError("streaming needs the BLS model deployed in decoupled mode")
        seen: list[int] = []
        sent = 0  # characters of the decoded stream sent so far (streaming without accumulate_tokens)
        last = None
        for resp in self._call(self.llm, llm_in, ["output_ids", "sequence_length", *PASS], decoupled=True):
            if resp.has_error():
                raise RuntimeError(resp.error().message())
            ids = _get(resp, "output_ids")
            if ids is None:  # the empty final response
                continue
            last = resp
            lengths = _get(resp, "sequence_length")
            if not streaming:
                send(self._out(self._detok(ids, lengths), resp), False)
                continue
            # Decode what has streamed so far as one sequence, so a character split over tokens arrives whole.
            seen += ids[0, 0, : int(lengths[0, 0])].tolist()
            text = self._detok(np.array(seen, dtype=np.int32).reshape(1, 1, -1), np.array([[len(seen)]], np.int32))
            if not self.accumulate:
                piece, sent = whole_text(_as_str(text.reshape(-1)[0]), sent, final=False)
                text = np.array([[piece]], dtype=object)
            send(self._out(text, resp), False)
        if streaming and not self.accumulate and seen and last is not None:
            text = self._detok(np.array(seen, dtype=np.int32).reshape(1, 1, -1), np.array([[len(seen)]], np.int32))
            rest, sent = whole_text(_as_str(text.reshape(-1)[0]), sent, final=True)
            if rest:  # bytes that never became a character: sent as the decoder renders them
                send(self._out(np.array([[rest]], dtype=object), last), False)
        return last

    def _spec_step(
        self, model: str, ids: list[int], n_out: int, pre: Any, drafts: list[int] | None = None
    ) -> tuple[list[int], int]:
        """One non-streaming call of an LLM model on ``ids``: its new tokens and its draft counters."""
        inputs = [
            pb_utils.Tensor("input_ids", np.array([ids], dtype=np.int32)),
            pb_utils.Tensor("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
            pb_utils.Tensor("request_output_len", np.array([[n_out]], dtype=np.int32)),
            pb_utils.Tensor("exclude_input_in_output", np.array([[True]], dtype=bool)),
            pb_utils.Tensor("return_perf_metrics", np.array([[True]], dtype=bool)),
        ]
        for src, dst in (("OUT_END_ID", "end_id"), ("OUT_PAD_ID", "pad_id")):
            v = _get(pre, src)
            if v is not None:
                inputs.append(pb_utils.Tensor(dst, v))
        if drafts:
            inputs.append(pb_utils.Tensor("draft_input_ids", np.array([drafts], dtype=np.int32)))
        resp = self._call(model, inputs, ["output_ids", "sequence_length", *SPEC_COUNTERS])
        if resp.has_error():
            raise RuntimeError(f"{model}: {resp.error().message()}")
        ids_out = _get(resp, "output_ids")
        n = int(_get(resp, "sequence_length").reshape(-1)[0])
        counters = {k: _get(resp, k) for k in SPEC_COUNTERS}
        accepted = counters["total_accepted_draft_tokens"]
        return [int(t) for t in ids_out.reshape(-1)[:n]], int(accepted.reshape(-1)[0]) if accepted is not None else 0

    def _speculate(self, req: Any, pre: Any, send: Send) -> None:
        """Draft-target (upstream BLS semantics, docs/speculative-and-lora.md §3): per step the draft model
        proposes up to num_draft_tokens tokens, the target verifies them in one call that returns the
        accepted drafts plus one token of its own; the counters are summed over the steps."""
        k_max = int(pb_utils.get_input_tensor_by_name(req, "num_draft_tokens").as_numpy().reshape(-1)[0])
        st = pb_utils.get_input_tensor_by_name(req, "stream")
        if st is not None and bool(st.as_numpy().reshape(-1)[0]):
            raise RuntimeError("streaming is not supported with speculative decoding")
        if _get(pre, "INPUT_ID").shape[0] != 1:
            raise RuntimeError("speculative decoding is not supported with batch size > 1")
        n_in = int(_get(pre, "REQUEST_INPUT_LEN").reshape(-1)[0])
        ids = [int(t) for t in _get(pre, "INPUT_ID").reshape(-1)[:n_in]]
        max_tokens = int(_get(pre, "REQUEST_OUTPUT_LEN").reshape(-1)[0])
        end = _get(pre, "OUT_END_ID")
        end_id = int(end.reshape(-1)[0]) if end is not None else -1
        generated: list[int]
        generated, drafted, accepted, steps = [], 0, 0, 0
        while len(generated) < max_tokens:
            k = min(k_max, max_tokens - len(generated) - 1)
            drafts = self._spec_step(self.draft, ids, k, pre)[0] if k > 0 else []
            new, acc = self._spec_step(self.llm, ids, len(drafts) + 1, pre, drafts)
            steps += 1
            drafted += len(drafts)
            accepted += acc
            new = new[: max_tokens - len(generated)]
            generated += new
            ids += new
            if not new or end_id in new:
                break
        tokens = np.array(generated, dtype=np.int32).reshape(1, 1, -1)
        text = self._detok(tokens, np.array([[len(generated)]], dtype=np.int32))
        out = [
            pb_utils.Tensor("text_output", np.array(text, dtype=object).reshape(1, -1)),
            pb_utils.Tensor("total_draft_tokens", np.array([[drafted]], dtype=np.int32)),
            pb_utils.Tensor("total_accepted_draft_tokens", np.array([[accepted]], dtype=np.int32)),
            pb_utils.Tensor("acceptance_rate", np.array([[accepted / drafted if drafted else 0.0]], dtype=np.float32)),
            pb_utils.Tensor("num_output_tokens", np.array([[len(generated)]], dtype=np.int32)),
        ]
        send(pb_utils.InferenceResponse(output_tensors=out), False)

    def _out(self, text: npt.NDArray[Any], resp: Any) -> Any:
        tensors = [pb_utils.Tensor("text_output", np.array(text, dtype=object).reshape(1, -1))]
        for name in PASS:
            v = _get(resp, name)
            if v is not None:
                tensors.append(pb_utils.Tensor(name, v))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            responses: list[Any] = []
            for req in requests:
                box: list[Any] = []

                def keep(r: Any, final: bool, box: list[Any] = box) -> None:
                    box.append(r)

                try:
                    self._handle(req, keep)
                    responses.append(box[-1])
                except Exception as e:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"BLS: {e}")))
            return responses
        for req in requests:
            sender = req.get_response_sender()

            def send(r: Any, final: bool, sender: Any = sender) -> None:
                sender.send(r)

            try:
                self._handle(req, send)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception as e:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"BLS: {e}")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
