"""Triton model configs for speculative decoding and LoRA, and their lint against the engine's build_config.
Expected names and values come from tests/reference/speculative_lora.json (upstream templates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolchain.specs.loader import parse_spec_text
from toolchain.specs.matrix import Cell, expand
from toolchain.triton.speculative import apply_features, lint_features

pb = pytest.importorskip("tritonclient.grpc.model_config_pb2")
REF = json.loads((Path(__file__).resolve().parents[1] / "reference" / "speculative_lora.json").read_text())
MODES = REF["speculative_decoding_mode_values"]
BASE = {
    "name": "s",
    "model": {"source": "hf://org/model@main"},
    "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
    "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [4], "max_seq_len": [1024]},
    "serving": {"streaming": False, "decoupled": False},
}
DRAFT = {"mode": "draft_target", "max_draft_len": 5, "draft": {"source": "hf://org/draft@main"}}


def cell(**blocks: Any) -> Cell:
    return expand(parse_spec_text(yaml.safe_dump(BASE | blocks)))[0]


def configs() -> dict[str, Any]:
    llm = pb.ModelConfig(name="tensorrt_llm", backend="tensorrtllm", max_batch_size=4)
    llm.model_transaction_policy.decoupled = True
    llm.parameters["gpt_model_path"].string_value = "/engines/target"
    llm.parameters["enable_kv_cache_reuse"].string_value = "false"
    bls = pb.ModelConfig(name="tensorrt_llm_bls", backend="python", max_batch_size=4)
    bls.parameters["tensorrt_llm_model_name"].string_value = "tensorrt_llm"
    bls.parameters["tensorrt_llm_draft_model_name"].string_value = ""
    return {"tensorrt_llm": llm, "tensorrt_llm_bls": bls}


def params(cfg: Any) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_draft_target_adds_the_draft_model_the_bls_names() -> None:
    c = apply_features(configs(), cell(speculative=DRAFT), draft_model_path="/engines/draft")
    name = REF["triton"]["draft_model_name"]
    draft, llm, bls = c[name], c["tensorrt_llm"], c["tensorrt_llm_bls"]
    assert draft.name == name and params(draft)["gpt_model_path"] == "/engines/draft"
    assert params(llm)["gpt_model_path"] == "/engines/target"
    for cfg in (llm, draft):
        for k, v in REF["triton"]["draft_target_llm_parameters"].items():
            assert params(cfg)[k] == v
        assert not cfg.model_transaction_policy.decoupled
    assert set(REF["triton"]["bls_parameters"]) <= set(params(bls))
    assert params(bls)["tensorrt_llm_draft_model_name"] == name
    engine = {"speculative_decoding_mode": MODES["DRAFT_TOKENS_EXTERNAL"], "max_draft_len": 5, "max_batch_size": 4}
    draft_engine = {"speculative_decoding_mode": MODES["NONE"], "max_draft_len": 0, "max_batch_size": 4}
    assert lint_features(c, engine, draft_engine) == []
    assert any("not built for draft_tokens_external" in p for p in lint_features(c, {"max_draft_len": 0}))
    assert any(
        "draft engine's max_batch_size" in p for p in lint_features(c, engine, {**draft_engine, "max_batch_size": 1})
    )
    assert any("has no tensorrt_llm_draft" in p for p in lint_features(configs(), engine))


def test_lora_cache_parameters_and_their_lint() -> None:
    c = apply_features(configs(), cell(lora={"cache": {"gpu_memory_fraction": 0.1}}))
    p = params(c["tensorrt_llm"])
    ref = REF["triton"]["lora_cache_parameters"]
    assert set(ref) <= set(p)
    assert float(p["lora_cache_gpu_memory_fraction"]) == 0.1
    assert int(p["lora_cache_max_adapter_size"]) == ref["lora_cache_max_adapter_size"]
    with_plugin = {"lora_config": {"max_lora_rank": 64}, "plugin_config": {"lora_plugin": "float16"}}
    assert lint_features(c, with_plugin) == []
    assert any("without the LoRA plugin" in x for x in lint_features(c, {"plugin_config": {"lora_plugin": None}}))


@pytest.mark.parametrize("mode", ["medusa", "eagle", "lookahead"])
def test_decoding_mode_matches_the_engine(mode: str) -> None:
    block = {"mode": mode, "heads": {"source": "./h"}} if mode != "lookahead" else {"mode": mode}
    c = apply_features(configs(), cell(speculative=block))
    p = params(c["tensorrt_llm"])
    assert p["decoding_mode"] in REF["triton"]["decoding_modes"]
    engine_mode = {"medusa": "MEDUSA", "eagle": "EAGLE", "lookahead": "LOOKAHEAD_DECODING"}[mode]
    k = 83 if mode == "lookahead" else 63
    assert lint_features(c, {"speculative_decoding_mode": MODES[engine_mode], "max_draft_len": k}) == []
    # the same repository on a plain engine, or an engine of another mode, is caught
    assert lint_features(c, {"speculative_decoding_mode": MODES["NONE"], "max_draft_len": 0})
    if mode == "lookahead":
        bad = lint_features(c, {"speculative_decoding_mode": MODES[engine_mode], "max_draft_len": 10})
        assert any("needs an engine with max_draft_len 83" in x for x in bad)


def test_plain_engine_of_a_speculative_mode_needs_its_decoding_mode() -> None:
    assert any("decoding_mode must be medusa" in p for p in lint_features(configs(), {"speculative_decoding_mode": 4}))
    assert lint_features(configs(), {"speculative_decoding_mode": MODES["NONE"]}) == []


def test_predicted_build_config_lints_its_own_repository() -> None:
    from toolchain.specs.speculative_spec import draft_cell
    from toolchain.triton.speculative import predicted_build_config

    blocks: dict[str, Any]
    for blocks in (
        {"speculative": DRAFT},
        {"speculative": {"mode": "lookahead"}},
        {"speculative": {"mode": "medusa", "heads": {"source": "./h"}}},
        {"lora": {}},
        {},
    ):
        c = cell(**blocks)
        configs_ = apply_features(configs(), c, draft_model_path="/d")
        draft = (
            predicted_build_config(draft_cell(c))
            if "speculative" in blocks and blocks["speculative"] is DRAFT
            else None
        )
        assert lint_features(configs_, predicted_build_config(c), draft) == [], blocks
    assert (
        predicted_build_config(cell(speculative=DRAFT))["speculative_decoding_mode"] == MODES["DRAFT_TOKENS_EXTERNAL"]
    )
