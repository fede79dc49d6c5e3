"""``python -m toolchain.compile.warmup BUNDLE``: one warm-up run of TensorRT-LLM's LLM API on a GPU host,
with the cache variables of ``toolchain.artifacts.bundle.CACHE_ENV`` pointing into ``BUNDLE/caches`` (the
parent sets them). It starts the LLM with the bundle's options (as Triton's llmapi model and
trtllm-serve do: ``update_llm_args_with_extra_dict``), generates at the cell's batch and at batch 1 with
prompts of the cell's input length, and shuts down. Run in the bundle's directory: the options name
carried models relative to it. Needs TensorRT-LLM (an NVIDIA GPU host); exit 3 without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import yaml

    if len(argv) != 1:
        print("usage: python -m toolchain.compile.warmup BUNDLE", file=sys.stderr)
        return 2
    bundle = Path(argv[0]).resolve()
    try:
        from tensorrt_llm import LLM, SamplingParams
        from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict
    except ImportError as e:
        print(f"warm-up needs TensorRT-LLM (an NVIDIA GPU host): {e}", file=sys.stderr)
        return 3
    opts = yaml.safe_load((bundle / "extra_llm_api_options.yaml").read_text()) or {}
    made = json.loads((bundle / "bundle.json").read_text())["made_for"]
    shape = made["shape"]
    input_len = max(1, min(int(shape["max_input_len"]), shape["max_seq_len"] - 8))
    kwargs = update_llm_args_with_extra_dict({"model": str(bundle / "hf")}, opts)
    llm = LLM(**kwargs)
    try:
        params = SamplingParams(max_tokens=8, ignore_eos=True)
        prompt = [1] * input_len  # token ids: the shapes matter here, not the text
        llm.generate([prompt] * shape["max_batch_size"], params)
        llm.generate([prompt], params)
    finally:
        llm.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
