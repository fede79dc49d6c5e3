"""Draft-target and LoRA builds end to end on CPU with the trtllm-build stand-in: two engines, keyed
separately, both in the registry; the engine's build_config matches what TensorRT-LLM records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.artifacts.cell import for_cell
from toolchain.artifacts.recipe import recipe_from_spec
from toolchain.artifacts.source import source_dir
from toolchain.compile.draft import builds_for, draft_artifacts
from toolchain.quantize.run import quantize
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

pytestmark = pytest.mark.slow
FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "py"))
    monkeypatch.setenv("TRTLLM_ROOT", str(FAKES / "trtllm_root"))


@pytest.fixture(scope="module")
def draft_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny Llama with other weights (same tokenizer), the draft model."""
    from toolchain.quantize.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("draft") / "tiny-draft", seed=1)


def _spec(tmp_path: Path, ckpt: Path, **blocks: object) -> Path:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["quantization"]["calibration"].update(samples=8, seq_len=32)
    d["serving"]["streaming"] = False
    d["serving"]["decoupled"] = False
    d.update(blocks)
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_draft_target_builds_two_engines(
    stand_in: None, tiny_checkpoint: Path, draft_checkpoint: Path, tmp_path: Path
) -> None:
    block = {"mode": "draft_target", "max_draft_len": 4, "draft": {"source": str(draft_checkpoint)}}
    spec = load_spec(_spec(tmp_path, tiny_checkpoint, speculative=block))
    cell = expand(spec)[0]
    art = for_cell(cell)
    quantize(source_dir(spec), recipe_from_spec(spec), art.quantized_dir, reuse=True)
    reg = open_registry(str(tmp_path / "reg"))
    draft, target = builds_for(art, reg)
    assert (draft.status, target.status) == ("built", "built")
    assert draft.key != target.key and draft.cell.spec.name == f"{target.cell.spec.name}-draft"
    d_art = draft_artifacts(art)
    assert d_art is not None and d_art.engine_key == draft.key
    # target: built for external drafts; draft: a plain engine of the draft checkpoint (bf16: converted)
    assert "--speculative_decoding_mode" in target.command and "--speculative_decoding_mode" not in draft.command
    t_man, d_man = reg.get(target.key, tmp_path / "t"), reg.get(draft.key, tmp_path / "d")
    t_cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    d_cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert t_cfg["build_config"]["max_draft_len"] == 4 and t_cfg["build_config"]["max_seq_len"] == 256 + 4
    assert d_cfg["build_config"]["max_draft_len"] == 0 and d_cfg["build_config"]["max_seq_len"] == 256
    assert t_man.provenance["draft_engine_key"] == draft.key and t_man.provenance["role"] == "target"
    assert d_man.provenance["role"] == "draft"
    # a second run finds both in the registry
    assert [r.status for r in builds_for(art, reg)] == ["cached", "cached"]
    # the repository serves both engines; lint checks it against both build_configs
    from toolchain.pipeline.emit import emit_cell
    from toolchain.triton.lint import lint_repository

    repo = tmp_path / "repo"
    emit_cell(art, target.key, repo, registry=str(tmp_path / "reg"))
    assert json.loads((repo / "tensorrt_llm_draft" / "1" / "engine" / "config.json").read_text()) == d_cfg
    assert [f.line() for f in lint_repository(repo) if f.severity == "error"] == []
    pb = (repo / "tensorrt_llm_bls" / "config.pbtxt").read_text()
    assert "tensorrt_llm_draft" in pb
    # another draft model changes the draft's key only
    other = load_spec(
        _spec(tmp_path, tiny_checkpoint, speculative={**block, "draft": {"source": str(tiny_checkpoint)}})
    )
    o_art = for_cell(expand(other)[0])
    o_draft = draft_artifacts(o_art)
    assert o_art.engine_key == target.key and o_draft is not None and o_draft.engine_key != draft.key


def test_lora_engine_records_the_plugin(stand_in: None, tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, tiny_checkpoint, lora={"max_rank": 8, "target_modules": ["attn_q", "attn_v"]}))
    art = for_cell(expand(spec)[0])
    quantize(source_dir(spec), recipe_from_spec(spec), art.quantized_dir, reuse=True)
    reg = open_registry(str(tmp_path / "reg"))
    (r,) = builds_for(art, reg)
    assert r.status == "built"
    reg.get(r.key, tmp_path / "e")
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg["build_config"]["lora_config"] == {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_v"]}


def test_quantize_spec_also_quantizes_an_fp8_draft(
    cli: Cli, tiny_checkpoint: Path, draft_checkpoint: Path, tmp_path: Path
) -> None:
    block = {"mode": "draft_target", "max_draft_len": 3, "draft": {"source": str(draft_checkpoint), "weights": "fp8"}}
    path = _spec(tmp_path, tiny_checkpoint, speculative=block)
    r = cli("quantize", path, "--json")
    assert r.exit_code == 0, r.output
    spec = load_spec(path)
    d_art = draft_artifacts(for_cell(expand(spec)[0]))
    assert d_art is not None and (d_art.quantized_dir / "manifest.json").is_file()
    assert (for_cell(expand(spec)[0]).quantized_dir / "manifest.json").is_file()


def test_medusa_heads_convert_with_the_base_and_key_the_engine(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "medusa_lm_head.safetensors").write_bytes(b"heads v1")
    block = {"mode": "medusa", "heads": {"source": str(heads), "count": 3}}
    quant = {"weights": "bf16", "kv_cache": "auto", "calibration": {"samples": 8, "seq_len": 32}}
    spec = load_spec(_spec(tmp_path, tiny_checkpoint, speculative=block, quantization=quant))
    art = for_cell(expand(spec)[0])
    reg = open_registry(str(tmp_path / "reg"))
    (r,) = builds_for(art, reg)
    assert r.status == "built"
    assert any("examples/medusa/convert_checkpoint.py" in n and "--num_medusa_heads 3" in n for n in r.notes)
    reg.get(r.key, tmp_path / "e")
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg["pretrained_config"]["architecture"] == "MedusaForCausalLM"
    assert cfg["build_config"]["max_draft_len"] == 63 and cfg["build_config"]["max_seq_len"] == 256 + 63
    # other heads weights: another engine
    (heads / "medusa_lm_head.safetensors").write_bytes(b"heads v2, retrained")
    assert (
        for_cell(
            expand(load_spec(_spec(tmp_path, tiny_checkpoint, speculative=block, quantization=quant)))[0]
        ).engine_key
        != r.key
    )
