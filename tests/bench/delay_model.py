"""A decoupled Python model with known per-token delays, for measuring the load generator itself.

Written to a repository by the bench tests: ensemble-like I/O (text_input, max_tokens, stream ->
text_output, num_output_tokens); first token after first_delay_ms, then one every token_delay_ms;
every fail_every-th request fails.
"""

import json
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        cfg = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.first = float(p.get("first_delay_ms", "50")) / 1000
        self.gap = float(p.get("token_delay_ms", "20")) / 1000
        self.fail_every = int(p.get("fail_every", "0"))
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.n = 0

    def _out(self, text: str, count: int) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([[text]], dtype=object)),
                pb_utils.Tensor("num_output_tokens", np.array([[count]], dtype=np.int32)),
            ]
        )

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            return [self._out("x", 1) for _ in requests]
        for req in requests:
            self.n += 1
            sender = req.get_response_sender()
            if self.fail_every and self.n % self.fail_every == 0:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("injected failure")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            n = int(pb_utils.get_input_tensor_by_name(req, "max_tokens").as_numpy().reshape(-1)[0])
            time.sleep(self.first)
            for i in range(n):
                if i:
                    time.sleep(self.gap)
                sender.send(self._out(f"t{i}", i + 1))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
