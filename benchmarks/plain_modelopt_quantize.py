"""Baseline for benchmarks/quantize_bench.py: a plain ModelOpt script, no toolchain around it.

Loads a Hugging Face checkpoint, calibrates with ModelOpt on the same token ids the toolchain uses,
and writes the same two exports (TensorRT-LLM checkpoint, unified HF checkpoint): the second from a
copy restored with ``mto.restore``, since each exporter changes the model it reads.

Usage: plain_modelopt_quantize.py MODEL_DIR OUT_DIR FORMAT SAMPLES SEQ_LEN BATCH [DEVICE]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, cast

CFG = {
    "fp8": "FP8_DEFAULT_CFG",
    "int4_awq": "INT4_AWQ_CFG",
    "int8_sq": "INT8_SMOOTHQUANT_CFG",
}


def main(argv: list[str]) -> int:
    model_dir, out, fmt = Path(argv[0]), Path(argv[1]), argv[2]
    samples, seq_len, batch = int(argv[3]), int(argv[4]), int(argv[5])
    device = argv[6] if len(argv) > 6 else "cpu"

    import modelopt.torch.export as mexport
    import modelopt.torch.opt as mto
    import modelopt.torch.quantization as mtq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolchain.quantize.calib import load_texts, tokenize

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = cast(Any, AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)).to(device).eval()
    batches, _ = tokenize(tok, load_texts("builtin", Path.cwd(), 1234, samples), seq_len, batch)

    def forward_loop(m: torch.nn.Module) -> None:
        with torch.no_grad():
            for b in batches:
                m(input_ids=b.input_ids.to(device), attention_mask=b.attention_mask.to(device))

    model = mtq.quantize(model, copy.deepcopy(getattr(mtq, CFG[fmt])), forward_loop)
    # Each exporter changes the model it reads, so the second export reads a restored copy.
    state = out / "modelopt_state.pth"
    out.mkdir(parents=True, exist_ok=True)
    mto.save(model, str(state))
    with torch.inference_mode():
        mexport.export_tensorrt_llm_checkpoint(
            model,
            decoder_type="llama",
            dtype=torch.bfloat16,
            export_dir=out / "trtllm",
            inference_tensor_parallel=1,
            inference_pipeline_parallel=1,
        )
    del model
    with torch.inference_mode():
        fresh = cast(Any, AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16))
        restored = mto.restore(fresh.to(device), str(state))
        mexport.export_hf_checkpoint(restored, export_dir=out / "hf")
    state.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
