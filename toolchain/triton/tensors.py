"""Tensor names, dtypes and dims of the inflight_batcher_llm models, and the parameters the C++
backend cannot do without (docs/upstream-trtllm-1.1.md names the upstream files and commits).

Each row: (name, data type, dims, optional, allow_ragged_batch). ``LOGITS`` stands for the
engine's logits dtype (``logits_datatype``), filled at emission.
"""

from __future__ import annotations

T = tuple[str, str, tuple[int, ...], bool, bool]
LOGITS = "LOGITS"


def _row(name: str, dtype: str, dims: tuple[int, ...] = (1,), optional: bool = True, ragged: bool = False) -> T:
    return (name, dtype, dims, optional, ragged)


PRE_INPUTS: list[T] = [
    _row("QUERY", "TYPE_STRING", (1,), False),
    _row("DECODER_QUERY", "TYPE_STRING"),
    _row("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,), False),
    _row("BAD_WORDS_DICT", "TYPE_STRING", (-1,)),
    _row("STOP_WORDS_DICT", "TYPE_STRING", (-1,)),
    _row("EMBEDDING_BIAS_WORDS", "TYPE_STRING", (-1,)),
    _row("EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", (-1,)),
    _row("END_ID", "TYPE_INT32"),
    _row("PAD_ID", "TYPE_INT32"),
    _row("PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64"),
]
PRE_OUTPUTS: list[T] = [
    _row("INPUT_ID", "TYPE_INT32", (-1,)),
    _row("REQUEST_INPUT_LEN", "TYPE_INT32"),
    _row("DECODER_INPUT_ID", "TYPE_INT32", (-1,)),
    _row("REQUEST_DECODER_INPUT_LEN", "TYPE_INT32"),
    _row("BAD_WORDS_IDS", "TYPE_INT32", (2, -1)),
    _row("STOP_WORDS_IDS", "TYPE_INT32", (2, -1)),
    _row("EMBEDDING_BIAS", "TYPE_FP32", (-1,)),
    _row("REQUEST_OUTPUT_LEN", "TYPE_INT32", (-1,)),
    _row("OUT_END_ID", "TYPE_INT32"),
    _row("OUT_PAD_ID", "TYPE_INT32"),
    _row("OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", (-1,)),
]

_SCALAR_INPUTS = [
    ("end_id", "TYPE_INT32"),
    ("pad_id", "TYPE_INT32"),
    ("beam_width", "TYPE_INT32"),
    ("temperature", "TYPE_FP32"),
    ("runtime_top_k", "TYPE_INT32"),
    ("runtime_top_p", "TYPE_FP32"),
    ("len_penalty", "TYPE_FP32"),
    ("repetition_penalty", "TYPE_FP32"),
    ("min_tokens", "TYPE_INT32"),
    ("presence_penalty", "TYPE_FP32"),
    ("frequency_penalty", "TYPE_FP32"),
    ("seed", "TYPE_UINT64"),
    ("return_log_probs", "TYPE_BOOL"),
    ("return_context_logits", "TYPE_BOOL"),
    ("return_generation_logits", "TYPE_BOOL"),
    ("return_perf_metrics", "TYPE_BOOL"),
    ("return_num_input_tokens", "TYPE_BOOL"),
    ("return_num_output_tokens", "TYPE_BOOL"),
    ("exclude_input_in_output", "TYPE_BOOL"),
    ("stop", "TYPE_BOOL"),
    ("streaming", "TYPE_BOOL"),
    ("num_return_sequences", "TYPE_INT32"),
    ("decoder_input_lengths", "TYPE_INT32"),
    ("prompt_vocab_size", "TYPE_INT32"),
    ("lora_task_id", "TYPE_UINT64"),
    # sampling / beam-search knobs of the 1.x template
    ("runtime_top_p_min", "TYPE_FP32"),
    ("runtime_top_p_decay", "TYPE_FP32"),
    ("runtime_top_p_reset_ids", "TYPE_INT32"),
    ("early_stopping", "TYPE_BOOL"),
    ("beam_search_diversity_rate", "TYPE_FP32"),
    ("draft_acceptance_threshold", "TYPE_FP32"),
]
TRTLLM_INPUTS: list[T] = [
    _row("input_ids", "TYPE_INT32", (-1,), True, True),
    _row("input_lengths", "TYPE_INT32", (1,), False),
    _row("request_output_len", "TYPE_INT32", (1,), False),
    _row("decoder_input_ids", "TYPE_INT32", (-1,), True, True),
    _row("draft_input_ids", "TYPE_INT32", (-1,), True, True),
    _row("stop_words_list", "TYPE_INT32", (2, -1), True, True),
    _row("bad_words_list", "TYPE_INT32", (2, -1), True, True),
    _row("embedding_bias", "TYPE_FP32", (-1,), True, True),
    _row("prompt_embedding_table", "TYPE_FP16", (-1, -1), True, True),
    _row("prompt_table_extra_ids", "TYPE_UINT64", (-1,), True, True),
    _row("lora_weights", "TYPE_FP16", (-1, -1), True, True),
    _row("lora_config", "TYPE_INT32", (-1, 3), True, True),
    _row("guided_decoding_guide_type", "TYPE_STRING", (1,), True, True),
    _row("guided_decoding_guide", "TYPE_STRING", (1,), True, True),
    _row("draft_logits", LOGITS, (-1, -1), True, True),
    _row("retention_token_range_starts", "TYPE_INT32", (-1,), True, True),
    _row("retention_token_range_ends", "TYPE_INT32", (-1,), True, True),
    _row("retention_token_range_priorities", "TYPE_INT32", (-1,), True, True),
    _row("retention_token_range_durations_ms", "TYPE_INT32", (-1,), True, True),
    _row("retention_decode_priority", "TYPE_INT32", (1,), True, True),
    _row("retention_decode_duration_ms", "TYPE_INT32", (1,), True, True),
    _row("lookahead_window_size", "TYPE_INT32", (1,), True, True),
    _row("lookahead_ngram_size", "TYPE_INT32", (1,), True, True),
    _row("lookahead_verification_set_size", "TYPE_INT32", (1,), True, True),
] + [_row(n, t) for n, t in _SCALAR_INPUTS]
# Template inputs not declared, and why: encoder-decoder, multimodal and disaggregated serving are not
# what a decoder-only spec builds.
NOT_DECLARED = {
    "encoder_input_features": "encoder-decoder models only",
    "encoder_output_lengths": "encoder-decoder models only",
    "cross_attention_mask": "multimodal (mllama) only",
    "skip_cross_attn_blocks": "multimodal (mllama) only",
    "mrope_rotary_cos_sin": "multimodal (mrope) only",
    "mrope_position_deltas": "multimodal (mrope) only",
    "context_phase_params": "disaggregated serving only",
}

# Parameters the C++ backend reads outside any try/catch: a missing key throws at model load.
# Values: what toolchain emits when the spec says nothing (guided decoding off).
REQUIRED_PARAMETERS: dict[str, str] = {
    "gpt_model_type": "inflight_fused_batching",
    "tokenizer_dir": "",
    "xgrammar_tokenizer_info_path": "",
    "guided_decoding_backend": "",
}
SCALARS_RESHAPED = {n for n, _ in _SCALAR_INPUTS} | {"input_lengths", "request_output_len"}

PERF_OUTPUTS = [
    ("kv_cache_alloc_new_blocks", "TYPE_INT32"),
    ("kv_cache_reused_blocks", "TYPE_INT32"),
    ("kv_cache_alloc_total_blocks", "TYPE_INT32"),
    ("arrival_time_ns", "TYPE_INT64"),
    ("first_scheduled_time_ns", "TYPE_INT64"),
    ("first_token_time_ns", "TYPE_INT64"),
    ("last_token_time_ns", "TYPE_INT64"),
    ("acceptance_rate", "TYPE_FP32"),
    ("total_accepted_draft_tokens", "TYPE_INT32"),
    ("total_draft_tokens", "TYPE_INT32"),
    ("num_input_tokens", "TYPE_INT32"),
    ("num_output_tokens", "TYPE_INT32"),
]
TRTLLM_OUTPUTS: list[T] = [
    _row("output_ids", "TYPE_INT32", (-1, -1), False),
    _row("sequence_length", "TYPE_INT32", (-1,), False),
    _row("cum_log_probs", "TYPE_FP32", (-1,), False),
    _row("output_log_probs", "TYPE_FP32", (-1, -1), False),
    _row("context_logits", LOGITS, (-1, -1), False),
    _row("generation_logits", LOGITS, (-1, -1, -1), False),
    _row("batch_index", "TYPE_INT32", (1,), False),
    _row("sequence_index", "TYPE_INT32", (1,), False),
] + [_row(n, t, (1,), False) for n, t in PERF_OUTPUTS]

POST_INPUTS: list[T] = [
    _row("TOKENS_BATCH", "TYPE_INT32", (-1, -1), False),
    _row("SEQUENCE_LENGTH", "TYPE_INT32", (-1,), False),
]
POST_OUTPUTS: list[T] = [_row("OUTPUT", "TYPE_STRING", (-1,), False)]

ENSEMBLE_INPUTS: list[T] = [
    _row("text_input", "TYPE_STRING", (1,), False),
    _row("max_tokens", "TYPE_INT32", (1,), False),
    _row("decoder_text_input", "TYPE_STRING"),
    _row("bad_words", "TYPE_STRING", (-1,)),
    _row("stop_words", "TYPE_STRING", (-1,)),
    _row("exclude_input_in_output", "TYPE_BOOL"),
    _row("end_id", "TYPE_INT32"),
    _row("pad_id", "TYPE_INT32"),
    _row("top_k", "TYPE_INT32"),
    _row("top_p", "TYPE_FP32"),
    _row("temperature", "TYPE_FP32"),
    _row("length_penalty", "TYPE_FP32"),
    _row("repetition_penalty", "TYPE_FP32"),
    _row("min_tokens", "TYPE_INT32"),
    _row("presence_penalty", "TYPE_FP32"),
    _row("frequency_penalty", "TYPE_FP32"),
    _row("seed", "TYPE_UINT64"),
    _row("return_log_probs", "TYPE_BOOL"),
    _row("return_context_logits", "TYPE_BOOL"),
    _row("return_generation_logits", "TYPE_BOOL"),
    _row("return_perf_metrics", "TYPE_BOOL"),
    _row("return_num_input_tokens", "TYPE_BOOL"),
    _row("return_num_output_tokens", "TYPE_BOOL"),
    _row("num_return_sequences", "TYPE_INT32"),
    _row("beam_width", "TYPE_INT32"),
    _row("stream", "TYPE_BOOL"),
    _row("prompt_embedding_table", "TYPE_FP16", (-1, -1)),
    _row("prompt_table_extra_id", "TYPE_UINT64"),
    _row("prompt_vocab_size", "TYPE_INT32"),
    _row("embedding_bias_words", "TYPE_STRING", (-1,)),
    _row("embedding_bias_weights", "TYPE_FP32", (-1,)),
    _row("lora_task_id", "TYPE_UINT64"),
    _row("lora_weights", "TYPE_FP16", (-1, -1), True, True),
    _row("lora_config", "TYPE_INT32", (-1, 3), True, True),
    _row("guided_decoding_guide_type", "TYPE_STRING"),
    _row("guided_decoding_guide", "TYPE_STRING"),
]
PASS_THROUGH = [
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
] + [n for n, _ in PERF_OUTPUTS]
ENSEMBLE_OUTPUTS: list[T] = [_row("text_output", "TYPE_STRING", (-1,), False)] + [
    r for r in TRTLLM_OUTPUTS if r[0] in PASS_THROUGH
]
BLS_INPUTS: list[T] = [*ENSEMBLE_INPUTS, _row("num_draft_tokens", "TYPE_INT32"), _row("use_draft_logits", "TYPE_BOOL")]
BLS_OUTPUTS = ENSEMBLE_OUTPUTS

# Ensemble wiring (upstream inflight_batcher_llm ensemble/config.pbtxt):
# model input <- ensemble tensor, model output -> ensemble tensor.
PRE_MAP_IN = {
    "QUERY": "text_input",
    "DECODER_QUERY": "decoder_text_input",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
    "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
    "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
}
PRE_MAP_OUT = {
    "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
    "INPUT_ID": "_INPUT_ID",
    "REQUEST_DECODER_INPUT_LEN": "_REQUEST_DECODER_INPUT_LEN",
    "DECODER_INPUT_ID": "_DECODER_INPUT_ID",
    "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
    "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
    "BAD_WORDS_IDS": "_BAD_WORDS_IDS",
    "EMBEDDING_BIAS": "_EMBEDDING_BIAS",
    "OUT_END_ID": "_PREPROCESSOR_END_ID",
    "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
    "OUT_PROMPT_TABLE_EXTRA_IDS": "_OUT_PROMPT_TABLE_EXTRA_IDS",
}
LLM_MAP_IN = {
    "input_ids": "_INPUT_ID",
    "decoder_input_ids": "_DECODER_INPUT_ID",
    "input_lengths": "_REQUEST_INPUT_LEN",
    "decoder_input_lengths": "_REQUEST_DECODER_INPUT_LEN",
    "exclude_input_in_output": "exclude_input_in_output",
    "request_output_len": "_REQUEST_OUTPUT_LEN",
    "end_id": "_PREPROCESSOR_END_ID",
    "pad_id": "_PREPROCESSOR_PAD_ID",
    "embedding_bias": "_EMBEDDING_BIAS",
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "temperature": "temperature",
    "len_penalty": "length_penalty",
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
    "streaming": "stream",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "stop_words_list": "_STOP_WORDS_IDS",
    "bad_words_list": "_BAD_WORDS_IDS",
    "prompt_table_extra_ids": "_OUT_PROMPT_TABLE_EXTRA_IDS",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}
LLM_MAP_OUT = {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH", **{n: n for n in PASS_THROUGH}}
POST_MAP_IN = {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"}
POST_MAP_OUT = {"OUTPUT": "text_output"}
