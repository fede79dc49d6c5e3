"""Triton postprocessing model: token ids in, text out (toolchain; tensors per the TRT-LLM backend).

In the ensemble, the decoupled ``tensorrt_llm`` step streams each new token in a response of its own, and
Triton's ensemble scheduler runs this model once per response with the ensemble request's id (core
``ensemble_scheduler.cc``: ``irequest->SetId(request_id_)``). A token can end in the middle of a UTF-8
character, so decoding each response on its own turns "café" into "caf\ufffd\ufffd". With a request id this
model keeps the stream's token ids and sends only whole characters: each response's text is what the tokens so
far decode to beyond what was already sent, and a tail that decodes to U+FFFD (an unfinished character) waits
for the next token. A request without an id (the BLS, which sends all tokens so far) is decoded on its own.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


def _resolve(args: dict[str, str], value: str) -> str:
    """A relative path in a parameter is relative to this model's directory (relocatable repositories)."""
    if not value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(args["model_repository"], value))


IDLE_S = 60.0  # a stream whose last response is this old is over (this model never sees the final flag)
MAX_STREAMS = 4096  # at most this many streams' state is kept; the oldest goes first


class Stream:
    """One beam of one streamed request: its ids so far, and where the text already sent starts and ends.
    (A plain class: Triton's Python backend loads this file as a module that a dataclass cannot look up.)"""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:sent] decode to the context the next piece is measured against
        self.sent = 0  # ids before this index are in text already sent
        self.seen = 0.0


def next_piece(decode: Any, st: Stream, new: list[int]) -> str:
    """The whole characters ``new`` adds to the stream ``st`` (empty while the tail is an unfinished one)."""
    st.ids.extend(new)
    before = decode(st.ids[st.prefix : st.sent])
    after = decode(st.ids[st.prefix :])
    unfinished = after.endswith("\ufffd") and len(st.ids) - st.sent < 4  # a UTF-8 character is 4 bytes at most
    if len(after) <= len(before) or unfinished:
        return ""  # nothing new yet, or the last token ends mid-character: wait for the next
    st.prefix, st.sent = st.sent, len(st.ids)
    return str(after[len(before) :])


class TritonPythonModel:
    streams: dict[tuple[str, int, int], Stream]

    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        params = cfg.get("parameters", {})
        self.tok = AutoTokenizer.from_pretrained(_resolve(args, params["tokenizer_dir"]["string_value"]))
        skip = params.get("skip_special_tokens", {}).get("string_value", "true").lower()
        self.skip_special = skip not in ("false", "0", "f", "n", "no")
        self.streams = {}

    def _decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=self.skip_special))

    def _stream(self, key: tuple[str, int, int], now: float) -> Stream:
        for k in [k for k, s in self.streams.items() if now - s.seen > IDLE_S]:
            del self.streams[k]
        st = self.streams.pop(key, None) or Stream()
        st.seen = now
        self.streams[key] = st  # most recent last
        while len(self.streams) > MAX_STREAMS:
            del self.streams[next(iter(self.streams))]
        return st

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for req in requests:
            try:
                tokens = pb_utils.get_input_tensor_by_name(req, "TOKENS_BATCH").as_numpy()  # [batch, beams, T]
                lengths = pb_utils.get_input_tensor_by_name(req, "SEQUENCE_LENGTH").as_numpy()  # [batch, beams]
                rid = str(req.request_id() or "") if hasattr(req, "request_id") else ""
                now = time.monotonic()
                texts: list[str] = []
                for b in range(tokens.shape[0]):
                    for beam in range(tokens.shape[1]):
                        n = int(lengths[b, beam])
                        ids = [int(i) for i in tokens[b, beam, :n].tolist()]
                        if rid:  # one stream's next tokens: send whole characters only
                            texts.append(next_piece(self._decode, self._stream((rid, b, beam), now), ids))
                        else:
                            texts.append(self._decode(ids))
                out = np.array(texts, dtype=object).reshape(tokens.shape[0], tokens.shape[1])
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {e}")))
        return responses
