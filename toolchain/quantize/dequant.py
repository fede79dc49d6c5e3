"""The quantized export as a plain Hugging Face checkpoint: what the CPU stand-ins serve.

ModelOpt's unified HF export (``hf/``) stores packed INT4, FP8 or NVFP4 weights with their scales; the CPU
reference model and the LLM-API stand-in (PyTorch + Transformers) cannot run those kernels, so they serve the
float32 weights they stand for, dequantized with the same plain-torch code the accuracy gate runs
(``runtime.HFRuntime``: the pre-scale of SmoothQuant/AWQ is not folded into the weights, it applies to the input).
The export's quantization config and scales travel beside the weights (``runtime-numerics/``), and the stand-ins
run the Linear inputs and the KV cache with them as the gate does (``runtime.ServedNumerics``): the served tokens
carry the weight, activation and KV-cache quantization of what ships.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

SKIP = ("hf_quant_config.json", "manifest.json")
STAMP = "toolchain-dequantized.json"
# what the stamp records of how the copy was made: an older copy (pre-scale folded, no scales) is made again
LAYOUT = "unfolded+runtime-numerics/1"


def dequantized_checkpoint(export_hf: Path, dest: Path, *, source_digest: str | None = None) -> Path:
    """Write ``export_hf`` (a unified HF export) dequantized to float32 into ``dest`` (atomic), and return
    ``dest``; an existing ``dest`` made from the same export (``source_digest``) is reused."""
    from safetensors.torch import save_file

    from toolchain.digest import staged_dir
    from toolchain.quantize.runtime import NUMERICS_DIR, HFRuntime, carry_numerics

    stamp = {"export": str(export_hf), "export_digest": source_digest, "layout": LAYOUT}
    if source_digest is not None and (dest / STAMP).is_file():
        try:
            if json.loads((dest / STAMP).read_text()) == stamp:
                return dest
        except ValueError:
            pass
    with staged_dir(dest) as tmp:
        src = HFRuntime(export_hf, "cpu")  # the pre-scale is left to the input, as the runtime applies it
        tensors: dict[str, Any] = {n: src.get(n).contiguous() for n in src.names()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for f in export_hf.iterdir():
            if f.is_file() and f.name not in SKIP and f.suffix != ".safetensors" and f.name != "config.json":
                shutil.copy2(f, tmp / f.name)
            if f.name.endswith(".safetensors.index.json"):
                (tmp / f.name).unlink(missing_ok=True)  # one file now
        cfg = json.loads((export_hf / "config.json").read_text())
        cfg.pop("quantization_config", None)  # plain float weights: Transformers must not look for ModelOpt's
        cfg["torch_dtype"] = cfg["dtype"] = "float32"
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
        carry_numerics(export_hf, tmp / NUMERICS_DIR)
        (tmp / STAMP).write_text(json.dumps(stamp, sort_keys=True))
    return dest
