"""Model families: the planner's parameter formula against the parameters Transformers itself builds for
each family (the independent oracle), MoE decode arithmetic, `spec validate` per family × runtime, and
the support table held equal to the code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from toolchain.planning import bytes as B
from toolchain.quantize.tiny import FAMILIES as TINY_FAMILIES
from toolchain.quantize.tiny import TINY
from toolchain.specs import families
from toolchain.specs.arch import arch_from_config


def _transformers_count(cfg: dict[str, Any]) -> int:
    """Parameters of the model Transformers builds for ``cfg`` (a tied head counted once)."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    return sum(p.numel() for p in model.parameters())  # parameters() yields a shared tensor once


def _config(family: str, **extra: Any) -> dict[str, Any]:
    _, fam_extra = TINY_FAMILIES[family]
    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}  # inside the tiny vocabulary
    cfg: dict[str, Any] = {**TINY, **ids, "model_type": family, **fam_extra, **extra}
    cfg.setdefault("tie_word_embeddings", False)
    return cfg


# Each family at the tiny sizes, plus the variants that change the arithmetic (biases, sparse steps,
# dense-only layers, tied heads). Qwen2-MoE at the issue's size: hidden 128, 4 experts of 128 and a
# shared expert of 256 (issue 24 counted 624,256 with the old formula against the real 821,632).
CASES: list[tuple[str, dict[str, Any]]] = [(f, {}) for f in families.FAMILIES] + [
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("llama", {"tie_word_embeddings": True}),
    ("qwen2", {"tie_word_embeddings": False}),
    ("qwen3", {"attention_bias": True}),
    ("qwen2_moe", {"shared_expert_intermediate_size": 256}),
    ("qwen2_moe", {"decoder_sparse_step": 2, "num_hidden_layers": 4, "mlp_only_layers": [3]}),
    ("qwen3_moe", {"mlp_only_layers": [0]}),
    ("mixtral", {"num_local_experts": 8}),
    ("gemma2", {"num_hidden_layers": 3}),
    ("olmo2", {"num_key_value_heads": 4}),
]


@pytest.mark.parametrize(("family", "extra"), CASES, ids=[f"{f}-{'-'.join(e) or 'tiny'}" for f, e in CASES])
def test_config_formula_counts_what_transformers_builds(family: str, extra: dict[str, Any]) -> None:
    cfg = _config(family, **extra)
    assert arch_from_config(cfg).params == _transformers_count(cfg)


def test_the_issue_qwen2_moe_count() -> None:
    cfg = _config("qwen2_moe", shared_expert_intermediate_size=256)
    real = _transformers_count(cfg)
    assert real == 821_632  # the figure the issue measured on a tiny random Qwen2-MoE
    assert arch_from_config(cfg).params == real


def test_moe_decode_reads_only_routed_experts() -> None:
    """Batch 1 reads k of E experts per MoE layer; a large batch reads nearly all; the dense part in full."""
    cfg = _config("mixtral", num_local_experts=8, num_experts_per_tok=2)
    arch = arch_from_config(cfg)
    expert = 3 * 128 * 256  # one expert's gate, up and down projections
    layers = 2
    all_experts = layers * 8 * expert
    dense_fp8 = B.weight_bytes(arch, "fp8") - all_experts * 1.0  # FP8 Linear = 1 B per parameter
    one = B.decode_weight_bytes(arch, "fp8", batch=1)
    embed_saved = arch.embed_params * 2.0 - 1 * 128 * 2.0  # the input table, less the row looked up
    assert one == pytest.approx(dense_fp8 + layers * 2 * expert - embed_saved)
    # batch 4, uniform routing: E·(1 − (1 − k/E)^4) = 8·(1 − 0.75^4) experts per layer
    four = B.decode_weight_bytes(arch, "fp8", batch=4)
    hit = 8 * (1 - 0.75**4)
    assert four == pytest.approx(dense_fp8 + layers * hit * expert - (arch.embed_params - 4 * 128) * 2.0)
    assert B.decode_weight_bytes(arch, "fp8", batch=10_000) == pytest.approx(
        B.weight_bytes(arch, "fp8") - (arch.embed_params - 512 * 128) * 2.0, rel=1e-6
    )
    # active parameters (prefill FLOPs): the dense part plus k experts per layer
    assert arch.active_params == arch.params - layers * 6 * expert


def test_catalog_mixtral_tpot_floor_reads_two_of_eight_experts() -> None:
    """Mixtral-8x7B at batch 1 in FP8 reads about 12.9 GB (2 of 8 experts), not the 47 GB of all weights."""
    from toolchain.specs.arch import CATALOG

    m = CATALOG["mixtral-8x7b"]
    attn = 32 * 4096 * 128 * (2 * 32 + 2 * 8)  # 32 layers of q/k/v/o, GQA 32/8, head_dim 128
    routed = 32 * 2 * 3 * 4096 * 14336  # 2 experts of 3 × 4096 × 14336 per layer
    router = 32 * 4096 * 8
    lm_head_and_row = (32000 + 1) * 4096 * 2.0  # bf16 output head + one embedding row
    norms = (2 * 32 + 1) * 4096 * 2.0
    assert B.weight_bytes(m, "fp8") / 1e9 == pytest.approx(47.0, abs=1.0)
    expected = attn + routed + router + lm_head_and_row + norms
    assert B.decode_weight_bytes(m, "fp8", batch=1) == pytest.approx(expected)
    assert expected / 1e9 == pytest.approx(12.9, abs=0.05)


# --- spec validate, per family and runtime ----------------------------------------------------------------


def _spec(tmp: Path, ckpt: Path, runtime: str, weights: str = "fp8") -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["runtime"] = runtime
    d["quantization"]["weights"] = weights
    if weights != "fp8":  # an FP8 KV cache is for FP8 weights (the paged-context rule)
        d["quantization"]["kv_cache"] = "auto"
    if runtime == "pytorch":
        d["target"] = {"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"}
    path = tmp / f"{ckpt.name}-{runtime}-{weights}.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


MATRIX = [(f, r, w) for f in families.FAMILIES for r in families.RUNTIMES for w in ("fp8", "bf16")] + [
    (f, r, "int4_awq") for f, fam in families.FAMILIES.items() if fam.moe for r in families.RUNTIMES
]


@pytest.mark.parametrize(("family", "runtime", "weights"), MATRIX)
def test_spec_validate_decides_each_family_up_front(
    cli: Cli, family_checkpoints: dict[str, Path], tmp_path: Path, family: str, runtime: str, weights: str
) -> None:
    fam = families.FAMILIES[family]
    v = families.verdict(fam, runtime, weights)
    res = cli("spec", "validate", _spec(tmp_path, family_checkpoints[family], runtime, weights))
    if v.ok:
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and " — " in lines[0], res.output
    assert fam.name in lines[0] and f"runtime {runtime}" in lines[0]
    assert "Traceback" not in res.output
    # the plan refuses the same spec with the same reason (nothing is accepted, then refused later)
    plan = cli("plan", _spec(tmp_path, family_checkpoints[family], runtime, weights))
    assert plan.exit_code == 2 and fam.name in plan.output, plan.output


def test_a_family_the_toolchain_does_not_name_is_refused_by_validate(
    cli: Cli, family_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    res = cli("spec", "validate", _spec(tmp_path, family_checkpoints["gpt_neox"], "tensorrt"))
    assert res.exit_code == 2
    pattern = r"Error: .*model_type 'gpt_neox' is not a family this toolchain .* — supported families: llama"
    assert re.match(pattern, res.output)


def test_catalog_architecture_is_judged_too(cli: Cli, tmp_path: Path) -> None:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"] = {"source": "hf://mistralai/Mixtral-8x7B-v0.1@main", "architecture": "mixtral-8x7b"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(d))
    res = cli("spec", "validate", tmp_path / "m.yaml")
    assert res.exit_code == 2 and "Mixtral (mixtral) on runtime tensorrt" in res.output


def test_quantize_refuses_a_family_with_no_export_in_one_line(
    cli: Cli, family_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    for fam in ("gemma2", "granite", "olmo2", "gpt_neox"):
        res = cli(
            "quantize", "--checkpoint", family_checkpoints[fam], "--weights", "fp8", "--out", tmp_path / f"q-{fam}"
        )
        assert res.exit_code == 2, res.output
        assert res.output.startswith("Error: ") and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
        # the table's alternative (as `spec validate` gives it), never the list of supported architectures
        assert "supported: " not in res.output and "ForCausalLM" not in res.output.split(" — ")[-1]
        if fam in families.FAMILIES:
            assert res.output.strip().endswith(f" — {families.FAMILIES[fam].pytorch.fix}"), res.output
    # a mixture of experts with AWQ: refused before calibration, in one line, with the format to use
    mixtral = family_checkpoints["mixtral"]
    moe = cli("quantize", "--checkpoint", mixtral, "--weights", "int4_awq", "--out", tmp_path / "m")
    assert moe.exit_code == 2 and moe.output.startswith("Error: Mixtral with int4_awq: ")
    assert "weights: fp8" in moe.output


def test_build_dry_run_says_the_quantized_checkpoint_is_missing(
    cli: Cli, family_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    res = cli("build", _spec(tmp_path, family_checkpoints["llama"], "tensorrt"), "--all", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "does not exist yet: run `toolchain quantize SPEC`" in res.output
    js = cli("build", _spec(tmp_path, family_checkpoints["llama"], "tensorrt"), "--all", "--dry-run", "--json")
    notes = json.loads(js.stdout)["cells"][0]["notes"]
    assert any("does not exist yet" in n for n in notes)


# --- the support table --------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", ["docs/model-families.md"])
def test_support_table_in_docs_equals_the_code(doc: str) -> None:
    text = (REPO / doc).read_text()
    assert families.support_table() in text, f"{doc}: regenerate with `python -m toolchain.specs.families`"


def test_reasons_table_in_docs_equals_the_code() -> None:
    assert families.reasons_table() in (REPO / "docs" / "model-families.md").read_text()


def test_every_refusal_names_a_source_and_an_alternative() -> None:
    for f in families.FAMILIES.values():
        for r in families.RUNTIMES:
            v = families.verdict(f, r, "fp8")
            if not v.ok:
                assert v.fix and v.source, (f.model_type, r)
    # at least one runtime takes each family the quantizer exports
    assert families.FAMILIES["mixtral"].pytorch.ok and families.FAMILIES["phi3"].pytorch.ok


def test_tiny_builder_covers_every_family() -> None:
    assert set(families.FAMILIES) <= set(TINY_FAMILIES)


def test_catalog_families_are_known() -> None:
    from toolchain.specs.arch import CATALOG

    assert set(families.CATALOG_FAMILY) == set(CATALOG)
    assert all(v in families.FAMILIES for v in families.CATALOG_FAMILY.values())


def test_an_hf_source_in_the_hub_cache_is_judged_offline(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config.json the Hugging Face cache already holds is read (never the network) and judged."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read at call time, set at import
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--tiny-gemma2"
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    cfg = {**_config("gemma2"), "architectures": ["Gemma2ForCausalLM"]}
    (repo / "snapshots" / rev / "config.json").write_text(json.dumps(cfg))
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"] = {"source": f"hf://acme/tiny-gemma2@{rev}"}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(d))
    res = cli("spec", "validate", tmp_path / "g.yaml")
    assert res.exit_code == 2 and "Gemma 2 (gemma2) on runtime tensorrt" in res.output, res.output
