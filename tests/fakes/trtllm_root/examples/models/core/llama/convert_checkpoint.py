#!/usr/bin/env python3
"""Test stand-in for TensorRT-LLM's examples/models/core/llama/convert_checkpoint.py.

Parses the flags docs/trtllm-build.md lists ("Checkpoints"), reads the HF config, and writes a TRT-LLM checkpoint
layout: config.json (architecture, dtype, mapping with world_size = tp*pp, no quantization) and
one rank{N}.safetensors-named file per rank.
"""

import argparse
import json
from pathlib import Path

p = argparse.ArgumentParser(allow_abbrev=False)
p.add_argument("--model_dir", required=True)
p.add_argument("--output_dir", default="tllm_checkpoint")
p.add_argument("--dtype", choices=["auto", "float16", "bfloat16", "float32"], default="auto")
p.add_argument("--tp_size", type=int, default=1)
p.add_argument("--pp_size", type=int, default=1)
p.add_argument("--workers", type=int, default=1)
a = p.parse_args()
hf = json.loads((Path(a.model_dir) / "config.json").read_text())
out = Path(a.output_dir)
out.mkdir(parents=True, exist_ok=True)
world = a.tp_size * a.pp_size
cfg = {
    "architecture": hf["architectures"][0],
    "dtype": a.dtype,
    "vocab_size": hf["vocab_size"],
    "hidden_size": hf["hidden_size"],
    "num_hidden_layers": hf["num_hidden_layers"],
    "num_attention_heads": hf["num_attention_heads"],
    "logits_dtype": "float32",
    "mapping": {"world_size": world, "tp_size": a.tp_size, "pp_size": a.pp_size},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
}
(out / "config.json").write_text(json.dumps(cfg))
for r in range(world):
    (out / f"rank{r}.safetensors").write_bytes(b"stand-in weights")
print(f"converted {a.model_dir} -> {out} ({world} ranks)")
