"""Decode-step physics: only the looked-up embedding rows are read (unless tied to lm_head), and the
fleet line of --explain names instances and GPUs both."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from tests.conftest import SPECS, Cli
from toolchain.planning import bytes as B
from toolchain.specs.arch import CATALOG


@pytest.mark.slow
def test_llama_3_1_8b_fp8_h100_floor_is_2_4_ms_not_2_74(cli: Cli) -> None:
    r = cli("plan", SPECS / "llama-3.1-8b-fp8.yaml", "--json")
    assert r.exit_code == 0, r.output
    h100 = [c for c in json.loads(r.output)["cells"] if c["gpu"] == "H100-SXM"]
    assert h100
    for c in h100:
        # 8.03 GB of FP8 Linear + BF16 lm_head/norms + 1280 tokens of FP8 KV, over 3.35 TB/s
        assert round(c["tpot_floor_b1_ms"], 1) == 2.4, c["tpot_floor_b1_ms"]


def test_untied_table_is_read_row_by_row_tied_table_in_full() -> None:
    arch = CATALOG["llama-3-70b"]
    table = arch.embed_params * 2.0
    total = B.weight_bytes(arch, "fp8")
    row = arch.hidden_size * 2.0
    assert B.decode_weight_bytes(arch, "fp8", batch=1) == total - table + row
    assert B.decode_weight_bytes(arch, "fp8", batch=64) == total - table + 64 * row
    tied = replace(arch, tie_embeddings=True)
    assert B.decode_weight_bytes(tied, "fp8", batch=64) == B.weight_bytes(tied, "fp8")


@pytest.mark.slow
def test_explain_fleet_line_gives_instances_and_gpus(cli: Cli) -> None:
    r = cli("plan", SPECS / "llama-3.3-70b-fp8-h100.yaml", "--explain")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "floor fleet:" in ln)
    m = re.search(r"per instance = ([\d.]+) instances; .* in whole instances of (\d+): (\d+) × \d+ = (\d+) GPUs", line)
    assert m, line
    instances, per, whole, gpus = float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))
    assert per == 2  # TP2
    assert whole >= instances and gpus == whole * per
