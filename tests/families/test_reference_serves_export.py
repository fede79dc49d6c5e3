"""The CPU reference model serves the quantized export (dequantized), not the fp32 source (issue 32, item 2):
the served weights are an independent dequantization of the export (AWQ's pre-scale left to the input, as the
runtime applies it, and carried with the export's other scales), and its greedy ids are those of Transformers on
the same weights with the export's runtime numerics (quantize.runtime), loaded independently here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS
from toolchain.artifacts.cell import for_cell
from toolchain.pipeline.emit import emit_cell
from toolchain.pipeline.quantize import run_quantize
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

pytestmark = pytest.mark.slow
PROMPT = "The quick brown fox jumps over the lazy dog and"


def _spec(tmp: Path, ckpt: Path) -> Path:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["quantization"].update(weights="int4_awq", kv_cache="auto")
    d["quantization"]["calibration"].update(samples=8, seq_len=32)
    d["quantization"]["accuracy"] = {"max_rel_logit_error": 1.0, "min_top1_agreement": 0.3, "max_ppl_increase": 5.0}
    path = tmp / "int4.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def _greedy(model: Any, tok: Any, n: int = 12) -> list[int]:
    import torch

    ids = tok(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
    return [int(i) for i in out[0, ids.shape[1] :]]


def test_reference_repository_serves_the_dequantized_export(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import torch
    import transformers
    from safetensors.torch import load_file

    from toolchain.quantize.accuracy import dequantize_hf_export
    from toolchain.quantize.runtime import HFRuntime, instrument, served_numerics

    spec_path = _spec(tmp_path, tiny_checkpoint)
    cell = expand(load_spec(spec_path))[0]
    art = for_cell(cell)
    before = emit_cell(art, "reference", tmp_path / "early")
    assert "NOT quantized" in before["reference_weights"]  # said, never passed off as the quantized model
    [outcome] = run_quantize(spec_path)
    res = emit_cell(for_cell(cell), "reference", tmp_path / "repo")
    assert res["reference_weights"] == (
        "quantized export (int4_awq) dequantized to float32, with its runtime numerics (activation and KV quantization)"
    )
    served_dir = next(p.parent for p in (tmp_path / "repo").rglob("model.safetensors"))
    served = load_file(str(served_dir / "model.safetensors"))
    carried = load_file(str(served_dir / "runtime-numerics" / "scales.safetensors"))

    # the same weights, dequantized independently of what emit wrote (AWQ's pre-scale folded in): the served
    # ones times the pre-scale carried beside them
    export = outcome.result.out / "hf"
    want = dequantize_hf_export(export)
    source = load_file(str(tiny_checkpoint / "model.safetensors"))
    assert served.keys() == want.keys()
    pqs = {
        k[: -len("pre_quant_scale")] + "weight": v.float() for k, v in carried.items() if k.endswith("pre_quant_scale")
    }
    assert pqs, "an AWQ export has pre-scales"
    assert all(torch.equal(served[k] * pqs[k][None, :] if k in pqs else served[k], want[k]) for k in want)
    q_proj = next(k for k in want if k.endswith("q_proj.weight"))
    assert not torch.equal(want[q_proj], source[q_proj].float())  # quantization changed the weights

    # greedy ids: the served directory with its carried numerics = the source model's class on the export's
    # weights (the gate's reading of the export) with the gate's numerics
    tok = transformers.AutoTokenizer.from_pretrained(tiny_checkpoint)
    view = HFRuntime(export, "cpu")
    ref = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    missing = ref.load_state_dict({n: view.get(n) for n in view.names()}, strict=False)
    assert not missing.unexpected_keys
    instrument(ref, view)
    srv = transformers.AutoModelForCausalLM.from_pretrained(served_dir, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    assert "quantization_config" not in srv.config.to_dict()
    numerics = served_numerics(served_dir)
    assert numerics is not None
    instrument(srv, numerics)
    assert _greedy(srv, tok) == _greedy(ref, tok)
