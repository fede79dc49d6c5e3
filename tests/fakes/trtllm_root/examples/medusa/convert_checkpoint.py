#!/usr/bin/env python3
"""Test stand-in for TensorRT-LLM's examples/medusa/convert_checkpoint.py (base model + Medusa heads into
one checkpoint). Its parser comes from tests/reference/speculative_lora.json ("medusa_convert_flags",
the upstream argparse definitions), never from toolchain; it writes config.json (architecture
MedusaForCausalLM, num_medusa_heads, max_draft_len) and one rank{N}.safetensors per rank."""

import argparse
import json
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "speculative_lora.json"
TYPES = {"str": str, "int": int}

p = argparse.ArgumentParser()
for name, f in json.loads(REFERENCE.read_text())["medusa_convert_flags"].items():
    p.add_argument(name, type=TYPES[f["type"]], default=f["default"], choices=f.get("choices"))
a = p.parse_args()
hf = json.loads((Path(a.model_dir) / "config.json").read_text())
assert a.medusa_model_dir and Path(a.medusa_model_dir).is_dir(), "--medusa_model_dir must be a directory"
out = Path(a.output_dir)
out.mkdir(parents=True, exist_ok=True)
world = a.tp_size * a.pp_size
cfg = {
    "architecture": "MedusaForCausalLM",
    "dtype": a.dtype,
    "vocab_size": hf["vocab_size"],
    "hidden_size": hf["hidden_size"],
    "num_hidden_layers": hf["num_hidden_layers"],
    "num_attention_heads": hf["num_attention_heads"],
    "logits_dtype": "float32",
    "num_medusa_heads": a.num_medusa_heads,
    "max_draft_len": a.max_medusa_token_len,
    "mapping": {"world_size": world, "tp_size": a.tp_size, "pp_size": a.pp_size},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
}
(out / "config.json").write_text(json.dumps(cfg))
for r in range(world):
    (out / f"rank{r}.safetensors").write_bytes(b"stand-in weights")
print(f"converted {a.model_dir} + Medusa heads {a.medusa_model_dir} -> {out} ({world} ranks)")
