#!/usr/bin/env python3
"""Test stand-in for TensorRT-LLM's examples/models/core/llama/convert_checkpoint.py.

Its parser is built from tests/reference/llama_convert_checkpoint_argparse.json (the upstream
argparse definitions, commit named there), never from toolchain. It reads the HF config and writes
a TRT-LLM checkpoint layout: config.json (architecture, dtype, mapping with world_size = tp*pp*cp,
no quantization) and one rank{N}.safetensors-named file per rank.
"""

import argparse
import json
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[6] / "reference" / "llama_convert_checkpoint_argparse.json"
TYPES = {"str": str, "int": int, "float": float}

ref = json.loads(REFERENCE.read_text())
p = argparse.ArgumentParser(allow_abbrev=ref["allow_abbrev"])
for name, f in ref["flags"].items():
    names = [name, *f.get("aliases", [])]
    if f.get("action") == "store_true":
        p.add_argument(*names, action="store_true", default=False)
        continue
    kw = {"type": TYPES[f["type"]], "default": f["default"]}
    for k in ("choices", "nargs", "const"):
        if k in f:
            kw[k] = f[k]
    p.add_argument(*names, **kw)
a = p.parse_args()
hf = json.loads((Path(a.model_dir) / "config.json").read_text())
out = Path(a.output_dir)
out.mkdir(parents=True, exist_ok=True)
world = a.tp_size * a.pp_size * a.cp_size
src_dtype = hf.get("torch_dtype") or hf.get("dtype") or "float16"
dtype = a.dtype if a.dtype != "auto" else {"float32": "float16"}.get(src_dtype, src_dtype)  # fp32 source -> fp16
cfg = {
    "architecture": hf["architectures"][0],
    "dtype": dtype,
    "vocab_size": hf["vocab_size"],
    "hidden_size": hf["hidden_size"],
    "num_hidden_layers": hf["num_hidden_layers"],
    "num_attention_heads": hf["num_attention_heads"],
    "logits_dtype": "float32",
    "mapping": {"world_size": world, "tp_size": a.tp_size, "pp_size": a.pp_size, "cp_size": a.cp_size},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
}
(out / "config.json").write_text(json.dumps(cfg))
for r in range(world):
    (out / f"rank{r}.safetensors").write_bytes(b"stand-in weights")
print(f"converted {a.model_dir} -> {out} ({world} ranks)")
