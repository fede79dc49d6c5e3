"""Speculative speed-up and break-even α, LoRA adapter memory — against hand computations."""

from __future__ import annotations

import pytest

from toolchain.planning.speculative import (
    adapter_bytes,
    break_even_alpha,
    expected_tokens,
    lora_memory,
    speedup,
)
from toolchain.specs.arch import ModelArch

TINY = ModelArch(
    "tiny",
    num_layers=2,
    hidden_size=128,
    intermediate_size=256,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    vocab_size=1000,
)


def test_expected_tokens_matches_the_seed_figures() -> None:
    # (1 - 0.8^6) / 0.2 = (1 - 0.262144) / 0.2 = 3.68928
    assert expected_tokens(0.8, 5) == pytest.approx(3.68928)
    # (1 - 0.75^6) / 0.25 = (1 - 0.177978515625) / 0.25 = 3.2880859375
    assert expected_tokens(0.75, 5) == pytest.approx(3.2880859375)
    assert expected_tokens(0.0, 5) == 1.0 and expected_tokens(1.0, 5) == 6.0
    with pytest.raises(ValueError):
        expected_tokens(1.2, 5)


def test_break_even_for_a_k5_draft_with_80ms_verify_and_5ms_draft() -> None:
    # E(α*) = (80 + 5) / 80 = 1.0625, i.e. α + α² + α³ + α⁴ + α⁵ = 0.0625 → α* ≈ 0.05883
    a = break_even_alpha(5, t_verify_ms=80.0, t_draft_ms=5.0)
    assert a is not None and 0.0588 < a < 0.0589
    assert sum(a**i for i in range(1, 6)) == pytest.approx(0.0625, abs=1e-9)
    assert speedup(a, 5, 80.0, 5.0) == pytest.approx(1.0)
    assert speedup(0.03, 5, 80.0, 5.0) < 1.0 < speedup(0.1, 5, 80.0, 5.0)
    # α = 0.75 at these costs: 3.288 × 80 / 85 = 3.0946×
    assert speedup(0.75, 5, 80.0, 5.0) == pytest.approx(3.2880859375 * 80 / 85)


def test_break_even_edges() -> None:
    assert break_even_alpha(5, 80.0, 0.0) == 0.0  # free drafting always helps
    assert break_even_alpha(5, 80.0, 400.0) is None  # a step worth 6 plain steps never pays
    # verify costlier than a plain step (large batch): E(α*) = (120 + 10) / 40 = 3.25
    a = break_even_alpha(5, 120.0, 10.0, t_base_ms=40.0)
    assert a is not None and expected_tokens(a, 5) == pytest.approx(3.25, abs=1e-9)


def test_adapter_bytes_by_hand() -> None:
    # rank 8: attn_q 8×(128+128) + attn_v 8×(128+64) + mlp_4h_to_h 8×(256+128) = 6656 per layer; × 2 layers × 2 B
    assert adapter_bytes(TINY, 8, ["attn_q", "attn_v", "mlp_4h_to_h"]) == 26624
    # TP2: q splits out (8×(128+64)), v splits out (8×(128+32)), 4h_to_h splits in (8×(128+128)) = 4864 → ×4
    assert adapter_bytes(TINY, 8, ["attn_q", "attn_v", "mlp_4h_to_h"], tp=2) == 19456
    with pytest.raises(ValueError, match="moe_router"):
        adapter_bytes(TINY, 8, ["moe_router"])


def test_lora_cache_counts() -> None:
    m = lora_memory(TINY, 8, ["attn_q"], tp=1, left_after_kv_bytes=1_000_000, gpu_fraction=0.05, host_bytes=1 << 20)
    one = 8 * 256 * 2 * 2  # 8192 B
    assert m.adapter_bytes_per_gpu == one and m.gpu_cache_bytes == pytest.approx(50_000)
    assert m.adapters_in_gpu_cache == 50_000 // one == 6 and m.adapters_in_host_cache == (1 << 20) // one == 128


def test_cell_plan_gives_break_even_and_lora_memory() -> None:
    import yaml

    from toolchain.planning.plan import explain, plan_cell
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.loader import parse_spec_text
    from toolchain.specs.matrix import expand

    text = {
        "name": "p",
        "model": {"source": "hf://meta-llama/Llama-3.3-70B-Instruct@main", "architecture": "llama-3.3-70b"},
        "quantization": {"weights": "fp8"},
        "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
        "matrix": {"gpu": ["H200-SXM"], "max_batch_size": [8], "max_seq_len": [4096]},
        "serving": {"streaming": False, "decoupled": False},
        "speculative": {
            "mode": "draft_target",
            "max_draft_len": 5,
            "draft": {
                "source": "hf://meta-llama/Llama-3.1-8B-Instruct@main",
                "weights": "fp8",
                "architecture": "llama-3.1-8b",
            },
        },
        "lora": {"max_rank": 16, "target_modules": ["attn_q", "attn_v"]},
        "slo": {"tpot_ms": {"p99": 60}},
        "traffic": {
            "peak_rps": 1,
            "input_tokens": {"mean": 512},
            "output_tokens": {"mean": 256},
            "speculative": {"draft_len": 5, "acceptance_rate": 0.75},
        },
    }
    spec = parse_spec_text(yaml.safe_dump(text))
    cell = expand(spec)[0]
    arch = arch_for_spec(spec, allow_network=False)
    plan = plan_cell(cell, arch)
    s = plan.features["speculative"]
    # the draft floor is the 8B model's, far below the 70B target's; K = 5 drafts cost 5 of them
    assert 0 < s["draft_tpot_ms"] < plan.tpot_floor_b1_ms / 4
    assert s["t_draft_ms"] == pytest.approx(5 * s["draft_tpot_ms"])
    ratio = (s["t_verify_ms"] + s["t_draft_ms"]) / s["t_verify_ms"]
    assert expected_tokens(s["break_even_alpha"], 5) == pytest.approx(ratio, abs=1e-9)
    assert s["speedup"] == pytest.approx(3.2880859375 / ratio)
    lo = plan.features["lora"]
    # 80 layers × 16 × [(8192 + 8192) + (8192 + 1024)] × 2 B
    assert lo["adapter_bytes_per_gpu"] == 80 * 16 * (16384 + 9216) * 2
    text_out = explain(plan, arch)
    assert "break-even" in text_out and "α* = " in text_out and "LoRA rank 16" in text_out
