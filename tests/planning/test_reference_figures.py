"""The planner reproduces the reference figures of docs/planning.md (and the correct KV size for GQA models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPECS, Cli
from toolchain.hardware.catalog import lookup_gpu
from toolchain.planning import bytes as B
from toolchain.planning.perf import fleet_size, speculative_tokens, tpot_floor_ms
from toolchain.specs.arch import CATALOG, arch_from_dir

H100 = lookup_gpu("H100-SXM")
L70 = CATALOG["llama-3-70b"]


@pytest.mark.parametrize(("fmt", "ms"), [("bf16", 41.8), ("fp8", 20.9), ("int4_awq", 10.4)])
def test_tpot_floor_70b_h100_batch1(fmt: str, ms: float) -> None:
    nominal_bytes = 70e9 * B.nominal_bytes_per_param(fmt)  # docs/planning.md: 140 GB / 70 GB / 35 GB
    assert H100.hbm_tb_s == 3.35
    assert round(tpot_floor_ms(nominal_bytes, 0, H100.hbm_bytes_s), 1) == ms


def test_kv_one_4096_request_70b_bf16_is_1_34_gb_not_5_37() -> None:
    kv = B.kv_bytes_per_request(L70, B.kv_dtype_bytes("auto", "bfloat16"), 4096)
    assert kv == 2 * 80 * 8 * 128 * 2 * 4096
    assert round(kv / 1e9, 2) == 1.34
    assert int(40e9 // kv) == 29  # 40 GB holds 29 such requests, not 7


def test_worked_example_34_36_gb() -> None:
    from toolchain.specs.arch import ModelArch

    mha_7b = ModelArch("7b-mha", 32, 4096, 11008, 32, 32, 128, 32000)
    total = 16 * B.kv_bytes_per_request(mha_7b, 2.0, 4096)
    assert round(total / 1e9, 2) == 34.36
    assert round(total / 2**30, 2) == 32.00


def test_fleet_example_78_raw_125_total() -> None:
    f = fleet_size(peak_rps=500, avg_output_tokens=200, tpot_target_ms=25, batch_at_sla=32)
    assert f.peak_tok_s == 100_000
    assert f.tok_s_per_instance == 1280
    assert int(f.raw_gpus) == 78
    assert f.total_gpus == 125


def test_speculative_expectation() -> None:
    assert round(speculative_tokens(0.8, 5), 2) == 3.69


def test_kv_per_rank_splits_kv_heads_over_tp_and_replicates_past_them() -> None:
    full = B.kv_bytes_per_token(L70, 2.0)
    assert B.kv_bytes_per_token(L70, 2.0, tp=2) == full / 2
    assert B.kv_bytes_per_token(L70, 2.0, tp=16) == full / 8  # 8 KV heads: one per rank, replicated


def test_weights_per_precision_include_scales() -> None:
    bf16 = B.weight_bytes(L70, "bf16")
    assert B.weight_bytes(L70, "fp8") < bf16 * 0.52
    int4 = B.weight_bytes(L70, "int4_awq")
    assert int4 > L70.linear_params * 0.5  # group scales on top of the nibbles
    assert B.bytes_per_param("nvfp4") == 0.5625


def test_safetensors_param_count_reads_headers_only(tmp_path: Path) -> None:
    import struct

    cfg = {
        "num_hidden_layers": 1,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "vocab_size": 10,
        "intermediate_size": 16,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    header = json.dumps(
        {"a": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]}, "__metadata__": {"format": "pt"}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 24)
    arch = arch_from_dir(tmp_path)
    assert arch.params == 12 and arch.params_source == "safetensors headers"


@pytest.mark.slow
def test_plan_cli_70b_json_and_explain(cli: Cli) -> None:
    r = cli("plan", SPECS / "llama-3.3-70b-fp8-h100.yaml", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    cell = data["cells"][0]
    assert cell["kv_bytes_per_token"] == 2 * 80 * 4 * 128 * 1  # FP8 KV, 8 KV heads over TP2
    assert cell["max_concurrency_at_max_seq"] >= 1
    assert cell["fleet"]["total_gpus"] % 2 == 0
    r = cli("plan", SPECS / "llama-3.3-70b-fp8-h100.yaml", "--explain")
    assert "KV/token/rank = 2 × 80 layers × 4 KV heads × 128 head dim × 1 B" in r.output


def _spec_with(tmp_path: Path, **over: Any) -> Path:
    import yaml

    d = yaml.safe_load((SPECS / "llama-3.3-70b-fp8-h200.yaml").read_text())
    for k, v in over.items():
        d[k] = v
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _local_spec(tmp_path: Path, config_text: str) -> Path:
    import yaml

    ck = tmp_path / "ck"
    ck.mkdir(exist_ok=True)
    (ck / "config.json").write_text(config_text)
    d = {
        "name": "x",
        "model": {"source": str(ck)},
        "target": {"trtllm_version": "1.2.1", "tensorrt_version": "10.13"},
        "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [1], "max_seq_len": [128]},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(d))
    return tmp_path / "c.yaml"


@pytest.mark.slow
def test_slo_below_floor_is_one_line_exit_2(cli: Cli, tmp_path: Path) -> None:
    p = _spec_with(tmp_path, slo={"tpot_ms": {"p99": 5}})
    r = cli("plan", p)
    assert r.exit_code == 2
    assert "TPOT SLO 5 ms is below the" in r.output and "ms floor of this GPU" in r.output


@pytest.mark.slow
def test_cell_that_cannot_fit(cli: Cli, tmp_path: Path) -> None:
    import yaml

    d = yaml.safe_load((SPECS / "llama-3.3-70b-fp8-h100.yaml").read_text())
    d["matrix"]["tp"] = [1]
    d["quantization"]["weights"] = "bf16"
    d["quantization"]["kv_cache"] = "auto"  # FP8 KV with BF16 weights breaks a compatibility rule plan applies
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    r = cli("plan", p)
    assert r.exit_code == 2 and "do not fit H100-SXM" in r.output


def test_bad_traffic_and_bad_config(cli: Cli, tmp_path: Path) -> None:
    p = _spec_with(tmp_path, traffic={"peak_rps": 0, "input_tokens": {"mean": 10}, "output_tokens": {"mean": 10}})
    r = cli("plan", p)
    assert r.exit_code == 2 and "traffic.peak_rps" in r.output
    r = cli("plan", _local_spec(tmp_path, "{not json"))
    assert r.exit_code == 2 and "not valid JSON" in r.output
    r = cli("plan", _local_spec(tmp_path, json.dumps({"hidden_size": 8})))
    assert r.exit_code == 2 and "missing num_hidden_layers" in r.output


def test_unknown_model_type_is_refused(cli: Cli, tmp_path: Path) -> None:
    cfg = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "vocab_size": 10,
    }
    r = cli("plan", _local_spec(tmp_path, json.dumps(cfg)))
    assert r.exit_code == 2 and "model_type 'deepseek_v3'" in r.output and "docs/model-families.md" in r.output
