"""Triton postprocessing model: token ids in, text out (toolchain; tensors per the TRT-LLM backend)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


def _resolve(args: dict[str, str], value: str) -> str:
    """A relative path in a parameter is relative to this model's directory (relocatable repositories)."""
    if not value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(args["model_repository"], value))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        cfg = json.loads(args["model_config"])
        params = cfg.get("parameters", {})
        self.tok = AutoTokenizer.from_pretrained(_resolve(args, params["tokenizer_dir"]["string_value"]))
        skip = params.get("skip_special_tokens", {}).get("string_value", "true").lower()
        self.skip_special = skip not in ("false", "0", "f", "n", "no")

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for req in requests:
            try:
                tokens = pb_utils.get_input_tensor_by_name(req, "TOKENS_BATCH").as_numpy()  # [batch, beams, T]
                lengths = pb_utils.get_input_tensor_by_name(req, "SEQUENCE_LENGTH").as_numpy()  # [batch, beams]
                texts: list[str | list[str]] = []  # decode() is typed to return a list for batches too
                for b in range(tokens.shape[0]):
                    for beam in range(tokens.shape[1]):
                        n = int(lengths[b, beam])
                        ids = tokens[b, beam, :n].tolist()
                        texts.append(self.tok.decode(ids, skip_special_tokens=self.skip_special))
                out = np.array(texts, dtype=object).reshape(tokens.shape[0], tokens.shape[1])
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {e}")))
        return responses
