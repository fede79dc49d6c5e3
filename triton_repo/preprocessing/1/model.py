"""Triton preprocessing model: text in, token ids out (toolchain; tensors per the TRT-LLM backend)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

if TYPE_CHECKING:
    import numpy.typing as npt


def _resolve(args: dict[str, str], value: str) -> str:
    """A relative path in a parameter is relative to this model's directory (relocatable repositories)."""
    if not value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(args["model_repository"], value))


def _flag(params: dict[str, Any], key: str, default: bool) -> bool:
    v = params.get(key, {}).get("string_value", "")
    if v.lower() in ("true", "1", "t", "y", "yes"):
        return True
    if v.lower() in ("false", "0", "f", "n", "no"):
        return False
    return default


def _in(req: Any, name: str) -> Any:
    return pb_utils.get_input_tensor_by_name(req, name)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        params = cfg.get("parameters", {})
        self.tok = AutoTokenizer.from_pretrained(
            _resolve(args, params["tokenizer_dir"]["string_value"]), padding_side="left"
        )
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.add_special = _flag(params, "add_special_tokens", True)
        self.end_id = self.tok.encode(self.tok.eos_token, add_special_tokens=False)[0]
        self.pad_id = self.tok.encode(self.tok.pad_token, add_special_tokens=False)[0]

    def _words(self, tensor: Any, batch: int) -> npt.NDArray[np.int32]:
        """Word lists in the backend's [batch, 2, N] format: flat ids, cumulative end offsets (-1 padded)."""
        if tensor is None:
            return np.empty([batch, 2, 0], dtype=np.int32)
        flat: list[list[int]] = []
        offs: list[list[int]] = []
        for row in tensor.as_numpy().reshape(batch, -1):
            ids: list[int] = []
            ends: list[int] = []
            for w in row:
                w = w.decode() if isinstance(w, bytes) else str(w)
                t = self.tok.encode(w, add_special_tokens=False) if w else []
                if t:
                    ids += t
                    ends.append(len(ids))
            flat.append(ids)
            offs.append(ends)
        n = max(1, max(len(x) for x in flat))
        out = np.zeros([batch, 2, n], dtype=np.int32)
        out[:, 1, :] = -1
        for i, (ids, ends) in enumerate(zip(flat, offs, strict=True)):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(ends)] = ends
        return out

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for req in requests:
            try:
                query = pb_utils.get_input_tensor_by_name(req, "QUERY").as_numpy()
                batch = query.shape[0]
                texts = [q.decode() if isinstance(q, bytes) else str(q) for q in query.reshape(batch, -1)[:, 0]]
                ids = [self.tok.encode(t, add_special_tokens=self.add_special) for t in texts]
                width = max(1, max(len(x) for x in ids))
                input_id = np.full([batch, width], self.pad_id, dtype=np.int32)
                for i, x in enumerate(ids):
                    input_id[i, : len(x)] = x
                lengths = np.array([[len(x)] for x in ids], dtype=np.int32)
                out_len = pb_utils.get_input_tensor_by_name(req, "REQUEST_OUTPUT_LEN").as_numpy().astype(np.int32)
                end = pb_utils.get_input_tensor_by_name(req, "END_ID")
                pad = pb_utils.get_input_tensor_by_name(req, "PAD_ID")
                end_id = np.full([batch, 1], self.end_id, np.int32) if end is None else end.as_numpy().astype(np.int32)
                pad_id = np.full([batch, 1], self.pad_id, np.int32) if pad is None else pad.as_numpy().astype(np.int32)
                tensors = [
                    pb_utils.Tensor("INPUT_ID", input_id),
                    pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
                    # decoder-only models: one pad token, length 1 (as TensorRT-LLM's own preprocessing does)
                    pb_utils.Tensor("DECODER_INPUT_ID", np.full([batch, 1], self.pad_id, dtype=np.int32)),
                    pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", np.ones([batch, 1], dtype=np.int32)),
                    pb_utils.Tensor("BAD_WORDS_IDS", self._words(_in(req, "BAD_WORDS_DICT"), batch)),
                    pb_utils.Tensor("STOP_WORDS_IDS", self._words(_in(req, "STOP_WORDS_DICT"), batch)),
                    pb_utils.Tensor("EMBEDDING_BIAS", np.empty([batch, 0], dtype=np.float32)),
                    pb_utils.Tensor("REQUEST_OUTPUT_LEN", out_len),
                    pb_utils.Tensor("OUT_END_ID", end_id),
                    pb_utils.Tensor("OUT_PAD_ID", pad_id),
                    pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", np.zeros([batch, 0], dtype=np.uint64)),
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as e:  # report per request; never take the model down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {e}")))
        return responses
