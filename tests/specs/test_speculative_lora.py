"""The `speculative` and `lora` spec blocks: strict shape, per-mode rules, checked against upstream facts
kept in tests/reference/speculative_lora.json (not the product's tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES, Cli
from toolchain.errors import SpecError
from toolchain.specs.loader import parse_spec_text
from toolchain.specs.models import EngineSpec
from toolchain.specs.rules import all_problems

REF = json.loads((Path(__file__).resolve().parents[1] / "reference" / "speculative_lora.json").read_text())
BASE = {
    "name": "s",
    "model": {"source": "hf://org/model@main"},
    "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
    "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [8], "max_seq_len": [1024]},
    "serving": {"streaming": False, "decoupled": False},
}


def spec(**blocks: Any) -> EngineSpec:
    return parse_spec_text(yaml.safe_dump(BASE | blocks))


def problem_lines(s: EngineSpec) -> str:
    return "\n".join(p.line() for p in all_problems(s))


DRAFT = {"mode": "draft_target", "max_draft_len": 5, "draft": {"source": "hf://org/draft@main"}}


def test_each_mode_loads_with_its_own_block() -> None:
    assert spec(speculative=DRAFT).speculative.draft_len == 5  # type: ignore[union-attr]
    medusa = spec(speculative={"mode": "medusa", "heads": {"source": "hf://org/h@main"}})
    assert (
        medusa.speculative is not None
        and medusa.speculative.draft_len == REF["modes"]["medusa"]["example_max_draft_len"]
    )
    assert (
        medusa.speculative.heads is not None
        and medusa.speculative.heads.count == REF["modes"]["medusa"]["example_count"]
    )
    eagle = spec(speculative={"mode": "eagle", "heads": {"source": "./eagle"}})
    assert eagle.speculative is not None and eagle.speculative.build_mode == "eagle"


def test_lookahead_draft_len_follows_the_upstream_formula() -> None:
    ex = REF["modes"]["lookahead"]["example"]
    la = spec(
        speculative={
            "mode": "lookahead",
            "lookahead": {"window_size": ex["W"], "ngram_size": ex["N"], "verification_set_size": ex["G"]},
        }
    )
    assert la.speculative is not None and la.speculative.draft_len == ex["max_draft_len"]
    # hand computation for (4, 3, 2): (3 - 2) + (4 - 1 + 2) * (3 - 1) = 11
    la2 = spec(
        speculative={"mode": "lookahead", "lookahead": {"window_size": 4, "ngram_size": 3, "verification_set_size": 2}}
    )
    assert la2.speculative is not None and la2.speculative.draft_len == 11
    with pytest.raises(SpecError, match="needs max_draft_len 11, not 10"):
        spec(
            speculative={
                "mode": "lookahead",
                "max_draft_len": 10,
                "lookahead": {"window_size": 4, "ngram_size": 3, "verification_set_size": 2},
            }
        )
    w, n, g = REF["modes"]["lookahead"]["smallest_meaningful"]
    spec(
        speculative={"mode": "lookahead", "lookahead": {"window_size": w, "ngram_size": n, "verification_set_size": g}}
    )
    with pytest.raises(SpecError, match="greater than or equal to 1"):
        spec(
            speculative={
                "mode": "lookahead",
                "lookahead": {"window_size": w, "ngram_size": n, "verification_set_size": g - 1},
            }
        )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"mode": "draft_target", "max_draft_len": 5}, "mode draft_target needs speculative.draft"),
        ({"mode": "draft_target", "draft": {"source": "./d"}}, "needs max_draft_len"),
        ({"mode": "medusa"}, "mode medusa needs speculative.heads"),
        ({**DRAFT, "heads": {"source": "./h"}}, "speculative.heads does not apply to mode draft_target"),
        ({"mode": "lookahead", "draft": {"source": "./d"}}, "speculative.draft does not apply to mode lookahead"),
        ({"mode": "eagle", "max_draft_len": 257, "heads": {"source": "./e"}}, "EAGLE allows max_draft_len <= 256"),
        ({"mode": "spec"}, "speculative.mode"),
        ({**DRAFT, "max_draft_len": 0}, "greater than or equal to 1"),
        ({**DRAFT, "draft": {"source": "./d", "weights": "int4_awq"}}, "speculative.draft.weights"),
        ({**DRAFT, "draft": {"source": "s3://bucket/d"}}, "unsupported scheme"),
        ({**DRAFT, "draft": {"source": "hf://org/draft@"}}, "is not hf://org/name[@revision]"),
        ({**DRAFT, "draft": {"source": "hf://org@v1"}}, "is not hf://org/name[@revision]"),
        ({"mode": "eagle", "heads": {"source": "hf://org/e/extra@v1"}}, "is not hf://org/name[@revision]"),
    ],
)
def test_bad_speculative_blocks_are_one_line_errors(block: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as e:
        spec(speculative=block)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_mode_precision_runtime_and_serving_rules() -> None:
    for mode, facts in REF["modes"].items():
        block = {
            "draft_target": DRAFT,
            "medusa": {"mode": "medusa", "heads": {"source": "./h"}},
            "eagle": {"mode": "eagle", "heads": {"source": "./h"}},
            "lookahead": {"mode": "lookahead"},
        }[mode]
        extra = (
            {"serving": {"streaming": False, "enable_chunked_prefill": False, "cuda_graphs": {"enabled": False}}}
            if mode == "eagle"
            else {}
        )
        for weights in ("bf16", "fp16", "fp8", "int4_awq", "int8_sq"):
            s = spec(speculative=block, quantization={"weights": weights}, **extra)
            supported = weights in facts["precisions"]
            assert ("supports" in problem_lines(s)) is (not supported), (mode, weights, problem_lines(s))
    assert "does not support backend" in problem_lines(
        spec(
            speculative={"mode": "medusa", "heads": {"source": "./h"}},
            runtime="pytorch",
            target={"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"},
        )
    )
    assert "rejects streaming" in problem_lines(spec(speculative=DRAFT, serving={"streaming": True}))
    eagle = problem_lines(spec(speculative={"mode": "eagle", "heads": {"source": "./h"}}))
    assert "chunked context" in eagle and "CUDA graphs" in eagle
    big = spec(
        speculative={"mode": "eagle", "heads": {"source": "./h"}},
        matrix={"gpu": ["H100-SXM"], "max_batch_size": [1024], "max_seq_len": [1024]},
    )
    assert "max_batch_size <= 512" in problem_lines(big)
    fp8_draft_a100 = spec(
        speculative={**DRAFT, "draft": {"source": "./d", "weights": "fp8"}},
        matrix={"gpu": ["A100-80GB-SXM"], "max_batch_size": [8], "max_seq_len": [1024]},
    )
    assert "FP8 draft needs SM >= 89" in problem_lines(fp8_draft_a100)
    assert problem_lines(spec(speculative=DRAFT)) == ""


def test_lora_block_takes_exactly_the_upstream_module_names() -> None:
    upstream = set(REF["lora_module_ids"])
    s = spec(lora={"target_modules": sorted(upstream)})
    assert s.lora is not None and set(s.lora.target_modules) == upstream
    with pytest.raises(SpecError, match=r"lora\.target_modules"):
        spec(lora={"target_modules": ["q_proj"]})
    with pytest.raises(SpecError, match="must not repeat"):
        spec(lora={"target_modules": ["attn_q", "attn_q"]})
    d = spec(lora={}).lora
    assert d is not None and d.max_rank == REF["trtllm_build_flags"]["--max_lora_rank"]["default"]
    cache = REF["triton"]["lora_cache_parameters"]
    assert d.cache.optimal_adapter_size == cache["lora_cache_optimal_adapter_size"]
    assert d.cache.max_adapter_size == cache["lora_cache_max_adapter_size"]
    assert d.cache.gpu_memory_fraction == cache["lora_cache_gpu_memory_fraction"]
    assert d.cache.host_memory_bytes == cache["lora_cache_host_memory_bytes"]
    assert "max_adapter_size to at least 128" in problem_lines(spec(lora={"max_rank": 128}))
    assert "LLM-API" in problem_lines(spec(lora={"max_loras": 2}))


def test_absent_blocks_leave_existing_keys_alone() -> None:
    from toolchain.artifacts.keys import engine_key, key_material
    from toolchain.specs.matrix import expand

    cell = expand(spec())[0]
    ckpt = {"digest": "sha256:" + "0" * 64}
    assert not any(k.startswith(("speculative", "lora")) for k in key_material(cell, ckpt)["build"])
    with_lora = expand(spec(lora={}))[0]
    assert engine_key(with_lora, ckpt) != engine_key(cell, ckpt)


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("bad-medusa-fp8.yaml", "speculative mode medusa supports bf16, fp16 weights, not fp8"),
        ("bad-lora-module.yaml", "bad-lora-module.yaml:5 lora.target_modules[1]"),
    ],
)
def test_cli_reports_one_line(cli: Cli, fixture: str, expected: str) -> None:
    r = cli("spec", "validate", FIXTURES / fixture)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and expected in lines[0], r.output


@pytest.mark.parametrize("adapter", ["hf://org/ad@", "hf://org@v1", "hf://org/ad/sub@v1"])
def test_bad_hub_adapters_are_one_line_errors(adapter: str) -> None:
    """`hf://org/ad@` (an empty revision) was taken as pinned, and the build downloaded main instead."""
    with pytest.raises(SpecError) as e:
        spec(lora={"adapters": [adapter]})
    assert "is not hf://org/name[@revision]" in str(e.value) and "\n" not in str(e.value)
