"""Triton BLS model: preprocessing -> tensorrt_llm -> postprocessing in one model (toolchain).

Streams text chunks when this model is decoupled and the request sets `stream`; otherwise returns
the whole text. Perf outputs of the tensorrt_llm model are passed through.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

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


def _get(resp, name):
    t = pb_utils.get_output_tensor_by_name(resp, name)
    return None if t is None else t.as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.llm = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.accumulate = params.get("accumulate_tokens", "false").lower() == "true"

    def _call(self, model, inputs, outputs, decoupled=False):
        req = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        return req.exec(decoupled=decoupled)

    def _detok(self, tokens, lengths):
        resp = self._call(
            "postprocessing",
            [pb_utils.Tensor("TOKENS_BATCH", tokens), pb_utils.Tensor("SEQUENCE_LENGTH", lengths)],
            ["OUTPUT"],
        )
        if resp.has_error():
            raise RuntimeError(resp.error().message())
        return _get(resp, "OUTPUT")

    def _handle(self, req, send):
        pre_in = []
        for src, dst in TO_PRE.items():
            t = pb_utils.get_input_tensor_by_name(req, src)
            if t is not None:
                pre_in.append(pb_utils.Tensor(dst, t.as_numpy()))
        pre = self._call("preprocessing", pre_in, list(PRE_TO_LLM))
        if pre.has_error():
            raise RuntimeError(pre.error().message())
        llm_in = [pb_utils.Tensor(dst, _get(pre, src)) for src, dst in PRE_TO_LLM.items()]
        for src, dst in TO_LLM.items():
            t = pb_utils.get_input_tensor_by_name(req, src)
            if t is not None:
                llm_in.append(pb_utils.Tensor(dst, t.as_numpy()))
        st = pb_utils.get_input_tensor_by_name(req, "stream")
        streaming = bool(st.as_numpy().reshape(-1)[0]) if st is not None else False
        if streaming and not self.decoupled:
            raise RuntimeError("streaming needs the BLS model deployed in decoupled mode")
        seen = []
        last = None
        for resp in self._call(self.llm, llm_in, ["output_ids", "sequence_length", *PASS], decoupled=True):
            if resp.has_error():
                raise RuntimeError(resp.error().message())
            ids = _get(resp, "output_ids")
            if ids is None:  # the empty final response
                continue
            last = resp
            lengths = _get(resp, "sequence_length")
            if streaming:
                if self.accumulate:
                    seen += ids[0, 0, : int(lengths[0, 0])].tolist()
                    ids = np.array(seen, dtype=np.int32).reshape(1, 1, -1)
                    lengths = np.array([[len(seen)]], dtype=np.int32)
                send(self._out(self._detok(ids, lengths), resp), False)
            else:
                send(self._out(self._detok(ids, lengths), resp), False)
        return last

    def _out(self, text, resp):
        tensors = [pb_utils.Tensor("text_output", np.array(text, dtype=object).reshape(1, -1))]
        for name in PASS:
            v = _get(resp, name)
            if v is not None:
                tensors.append(pb_utils.Tensor(name, v))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for req in requests:
                box = []
                try:
                    self._handle(req, lambda r, final, box=box: box.append(r))
                    responses.append(box[-1])
                except Exception as e:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"BLS: {e}")))
            return responses
        for req in requests:
            sender = req.get_response_sender()
            try:
                self._handle(req, lambda r, final, sender=sender: sender.send(r))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception as e:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"BLS: {e}")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
