#!/usr/bin/env python
"""Build the tiny random-weight Llama + locally trained BPE tokenizer (no download).

Usage: scripts/make_tiny_checkpoint.py [OUT_DIR]   (default: .work/tiny-llama, where engine_specs/tiny.yaml looks)
The installed package does the same without a checkout: `toolchain tiny-checkpoint --out DIR`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolchain.quantize.tiny import make_tiny_checkpoint

if __name__ == "__main__":
    default = Path(__file__).resolve().parents[1] / ".work" / "tiny-llama"
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    print(make_tiny_checkpoint(out, force="--force" in sys.argv))
