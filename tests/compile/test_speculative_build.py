"""trtllm-build flags, conversion steps and LLM-API options for speculative decoding and LoRA, parsed by
an argparse built from the upstream reference data (tests/reference/speculative_lora.json)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolchain.compile.speculative import adjusted_shape, feature_args, heads_convert_args
from toolchain.compile.synth import trtllm_build_args
from toolchain.specs.llmapi import llmapi_feature_options
from toolchain.specs.loader import parse_spec_text
from toolchain.specs.matrix import Cell, expand

REF = json.loads((Path(__file__).resolve().parents[1] / "reference" / "speculative_lora.json").read_text())
BASE = {
    "name": "s",
    "model": {"source": "hf://org/model@main"},
    "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
    "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [4], "max_seq_len": [1024], "max_input_len": [512]},
    "serving": {
        "streaming": False,
        "decoupled": False,
        "enable_chunked_prefill": False,
        "cuda_graphs": {"enabled": False},
    },
}
DRAFT = {"mode": "draft_target", "max_draft_len": 5, "draft": {"source": "hf://org/draft@main"}}


def cell(**blocks: Any) -> Cell:
    return expand(parse_spec_text(yaml.safe_dump(BASE | blocks)))[0]


def upstream_parser() -> argparse.ArgumentParser:
    """The speculative and LoRA arguments of build.py, from the reference data only."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for name, f in REF["trtllm_build_flags"].items():
        if f.get("action") == "store_true":
            p.add_argument(name, action="store_true")
            continue
        choices = list(REF[f["choices_from"]]) if "choices_from" in f else f.get("choices")
        p.add_argument(
            name, type=int if f["type"] == "int" else str, nargs=f.get("nargs"), choices=choices, default=f["default"]
        )
    return p


def test_flags_per_mode_parse_as_upstream_does() -> None:
    p = upstream_parser()
    a = p.parse_args(feature_args(cell(speculative=DRAFT)))
    assert (a.speculative_decoding_mode, a.max_draft_len) == (REF["modes"]["draft_target"]["build_mode"], 5)
    for mode, block in [
        ("medusa", {"mode": "medusa", "heads": {"source": "./h"}}),
        ("eagle", {"mode": "eagle", "heads": {"source": "./h"}}),
        ("lookahead", {"mode": "lookahead"}),
    ]:
        a = p.parse_args(feature_args(cell(speculative=block)))
        assert a.speculative_decoding_mode == REF["modes"][mode]["build_mode"]
    la = REF["modes"]["lookahead"]["example"]
    a = p.parse_args(
        feature_args(
            cell(
                speculative={
                    "mode": "lookahead",
                    "lookahead": {"window_size": la["W"], "ngram_size": la["N"], "verification_set_size": la["G"]},
                }
            )
        )
    )
    assert a.max_draft_len == la["max_draft_len"]
    assert (
        p.parse_args(feature_args(cell(speculative={"mode": "medusa", "heads": {"source": "./h"}}))).max_draft_len
        == REF["modes"]["medusa"]["example_max_draft_len"]
    )
    assert feature_args(cell()) == []


def test_lora_flags_parse_as_upstream_does() -> None:
    a = upstream_parser().parse_args(
        feature_args(cell(lora={"max_rank": 16, "target_modules": ["attn_qkv", "attn_dense"]}))
    )
    assert a.lora_plugin in REF["trtllm_build_flags"]["--lora_plugin"]["choices"] and a.lora_plugin != "disable"
    assert a.lora_target_modules == ["attn_qkv", "attn_dense"] and a.max_lora_rank == 16


def test_full_command_keeps_what_each_mode_needs() -> None:
    for mode in ("draft_target", "eagle"):
        block = DRAFT if mode == "draft_target" else {"mode": "eagle", "heads": {"source": "./h"}}
        args = trtllm_build_args(cell(speculative=block), Path("/ckpt"), Path("/out"))
        for flag, value in REF["modes"][mode]["target_build_needs"].items():
            assert args[args.index(flag) + 1] == value
        assert "--gather_context_logits" not in args and "--gather_all_token_logits" not in args
    args = trtllm_build_args(cell(lora={}), Path("/ckpt"), Path("/out"))
    assert args[args.index("--lora_plugin") + 1] == "auto"


def test_engine_shape_after_trtllm_adjustments() -> None:
    c = cell(speculative=DRAFT)
    assert adjusted_shape(c, 16) == (1024 + 5, 4 * (5 + 1))
    assert adjusted_shape(c, 64) == (1024 + 5, 64)
    e = cell(speculative={"mode": "eagle", "heads": {"source": "./h", "count": 4}})
    assert adjusted_shape(e, 8192) == (1024 + 63 + 4, 8192)
    assert adjusted_shape(cell(), 8192) == (1024, 8192)


def test_heads_conversion_follows_the_examples(tmp_path: Path) -> None:
    m = heads_convert_args(
        cell(speculative={"mode": "medusa", "heads": {"source": "./h"}}),
        tmp_path / "base",
        tmp_path / "heads",
        tmp_path / "out",
        tmp_path / "trtllm",
    )
    assert m[1].endswith(REF["modes"]["medusa"]["converter"])
    assert m[m.index(REF["modes"]["medusa"]["heads_flag"]) + 1] == str(tmp_path / "heads")
    assert m[m.index(REF["modes"]["medusa"]["count_flag"]) + 1] == str(REF["modes"]["medusa"]["example_count"])
    e = heads_convert_args(
        cell(speculative={"mode": "eagle", "heads": {"source": "./h"}}),
        tmp_path / "base",
        tmp_path / "heads",
        tmp_path / "out",
        tmp_path / "trtllm",
    )
    assert e[1].endswith(REF["modes"]["eagle"]["converter"])
    assert e[e.index("--max_draft_len") + 1] == str(REF["modes"]["eagle"]["example_max_draft_len"])
    assert e[e.index(REF["modes"]["eagle"]["count_flag"]) + 1] == str(REF["modes"]["eagle"]["example_count"])


def test_llmapi_options_use_pytorch_decoding_types() -> None:
    c = cell(
        speculative=DRAFT,
        runtime="pytorch",
        target={"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"},
        lora={"adapters": ["./a"], "max_rank": 8, "max_loras": 2},
    )
    o = llmapi_feature_options(c, draft_dir="/art/draft")
    sc = o["speculative_config"]
    assert sc["decoding_type"] in REF["llmapi"]["decoding_types_pytorch"]
    assert sc == {"decoding_type": "Draft_Target", "max_draft_len": 5, "speculative_model": "/art/draft"}
    assert set(o["lora_config"]) <= set(REF["llmapi"]["lora_config_fields"])
    assert o["lora_config"]["max_lora_rank"] == 8 and o["lora_config"]["max_loras"] == 2
    from toolchain.errors import CompatibilityError

    with pytest.raises(CompatibilityError):
        llmapi_feature_options(cell(speculative={"mode": "lookahead"}))


def test_pytorch_options_file_carries_the_features() -> None:
    from toolchain.specs.llmapi import bundled_models, llmapi_options, validate_options

    c = cell(
        speculative={**DRAFT, "draft": {"source": "./draft"}},
        runtime="pytorch",
        target={"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"},
        lora={"adapters": ["hf://org/ad@v1", "hf://org/floating", "./local/ad"]},
    )
    o = llmapi_options(c)
    assert o["speculative_config"]["decoding_type"] == "Draft_Target"
    # carried models are named where the artifact holds them; a pinned hub adapter keeps its revision there
    assert o["speculative_config"]["speculative_model"] == "draft"
    assert o["lora_config"]["lora_dir"] == ["lora/0-ad", "lora/1-floating", "lora/2-ad"]
    carried = bundled_models(c.spec)
    assert carried["lora/0-ad"] == "hf://org/ad@v1" and carried["lora/1-floating"] == "hf://org/floating"
    assert Path(carried["draft"]).is_absolute() and Path(carried["lora/2-ad"]).is_absolute()
    assert validate_options({**o, "lora_config": {"lora_dirs": []}}) == ["unknown lora_config key lora_dirs"]


def converter_parser(flags: dict[str, Any]) -> argparse.ArgumentParser:
    """A converter's argparse, from the reference data only (unknown arguments are errors, as upstream)."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, f in flags.items():
        p.add_argument(name, type=int if f["type"] == "int" else str, default=f["default"], choices=f.get("choices"))
    return p


@pytest.mark.parametrize("mode", ["medusa", "eagle"])
def test_heads_conversion_parses_with_the_upstream_converter(mode: str, tmp_path: Path) -> None:
    c = cell(speculative={"mode": mode, "heads": {"source": "./h"}}, parallelism={"tp": 1})
    cmd = heads_convert_args(c, tmp_path / "base", tmp_path / "heads", tmp_path / "out", tmp_path / "trtllm")
    a = converter_parser(REF[f"{mode}_convert_flags"]).parse_args(cmd[2:])
    assert (a.model_dir, a.output_dir, a.dtype) == (str(tmp_path / "base"), str(tmp_path / "out"), "bfloat16")
    assert getattr(a, f"{mode}_model_dir") == str(tmp_path / "heads")
    if mode == "eagle":
        assert a.max_draft_len <= REF["eagle_convert_limits"]["max_draft_len_max"]
