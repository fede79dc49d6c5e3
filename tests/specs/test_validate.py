"""`toolchain spec validate|expand|schema` on the shipped specs and on bad fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, SPECS, Cli

SHIPPED = sorted(SPECS.glob("*.yaml"))


def test_every_shipped_spec_validates(cli: Cli) -> None:
    assert len(SHIPPED) >= 5
    r = cli("spec", "validate", *SHIPPED)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("bad-typo.yaml", "bad-typo.yaml:3 quantization.weigths: unknown key 'weigths'; did you mean 'weights'?"),
        ("bad-type.yaml", "matrix.max_batch_size[0]"),
        ("bad-unknown-gpu.yaml", "unknown GPU 'H100-SMX'; did you mean 'H100-SXM'?"),
        ("bad-fp8-on-a100.yaml", "fp8 needs FP8 tensor cores, SM >= 89; A100-80GB-SXM is SM 8.0"),
        ("bad-nvfp4-on-h100.yaml", "NVFP4 needs SM >= 100"),
        ("bad-int4-on-b200.yaml", "rejects on SM >= 100"),
        ("bad-int8kv-prefix.yaml", "INT8 KV cache turns off paged context FMHA"),
        ("bad-int4-fp8kv-prefix.yaml", "turns off paged context FMHA for an FP8 KV cache with int4_awq"),
        ("bad-input-len.yaml", "max_input_len 2048 exceeds max_seq_len 1024"),
        ("bad-streaming.yaml", "set serving.decoupled: true"),
        ("bad-tp-heads.yaml", "TP 3 does not divide the 32 attention heads"),
        ("bad-awq-group.yaml", "AWQ group size 128 does not divide the input dimension"),
        ("bad-version.yaml", "outside 1.0-1.2.x"),
        ("bad-container-version.yaml", "25.12-trtllm-python-py3 ships TensorRT-LLM 1.1.0 and TensorRT 10.13.3.9"),
        ("bad-yaml.yaml", "not valid YAML"),
        ("bad-empty.yaml", "the file is empty"),
        ("bad-list.yaml", "top level is list"),
        ("bad-duplicate.yaml", "key 'name' appears twice"),
    ],
)
def test_bad_spec_gives_one_line_and_exit_2(cli: Cli, fixture: str, expected: str) -> None:
    r = cli("spec", "validate", FIXTURES / fixture)
    assert r.exit_code == 2, r.output
    assert expected in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "Traceback" not in r.output


def test_directory_and_missing_file(cli: Cli, tmp_path: Path) -> None:
    r = cli("spec", "validate", tmp_path)
    assert r.exit_code == 2 and "is a directory" in r.output
    r = cli("spec", "validate", tmp_path / "nope.yaml")
    assert r.exit_code == 2 and "no such file" in r.output


def test_expand_8b_lists_2x2x2_cells(cli: Cli) -> None:
    r = cli("spec", "expand", SPECS / "llama-3.1-8b-fp8.yaml", "--json")
    assert r.exit_code == 0, r.output
    cells = json.loads(r.output)["cells"]
    assert len(cells) == 8
    assert {(c["gpu"], c["max_batch_size"], c["max_seq_len"]) for c in cells} == {
        (g, b, s) for g in ("H100-SXM", "H200-SXM") for b in (64, 256) for s in (4096, 8192)
    }
    assert len({c["engine_key"] for c in cells}) == 8
    assert all(len(c["engine_key"]) == 64 and len(c["profile_id"]) == 64 for c in cells)


def test_schema_is_json_schema_with_descriptions(cli: Cli) -> None:
    r = cli("spec", "schema")
    assert r.exit_code == 0
    s = json.loads(r.output)
    assert s["$schema"].startswith("https://json-schema.org/")
    assert s["additionalProperties"] is False
    assert "description" in s["$defs"]["BuildOptions"]["properties"]["max_num_tokens"]


@pytest.mark.parametrize(
    ("tensorrt", "flagged"),
    [("10.13.3", False), ("10.13", False), ("10.13.3.9", False), ("10.1", True), ("10.13.30", True)],
)
def test_container_tensorrt_version_matches_by_parts_not_by_prefix(
    cli: Cli, tmp_path: Path, tensorrt: str, flagged: bool
) -> None:
    """The 25.12 container ships TensorRT 10.13.3.9: "10.1" is another release, not a prefix match."""
    import yaml

    d = yaml.safe_load((SPECS / "llama-3.1-8b-fp8.yaml").read_text())
    d["runtime"] = "tensorrt"
    d["target"] = {
        "trtllm_version": "1.1.0",
        "tensorrt_version": tensorrt,
        "container": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
    }
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(d))
    r = cli("spec", "validate", spec)
    assert (r.exit_code != 0 and "ships TensorRT-LLM 1.1.0 and TensorRT 10.13.3.9" in r.output) == flagged, r.output
    assert (r.exit_code == 0) != flagged


def test_validate_json_errors_carry_the_exit_code(cli: Cli) -> None:
    """Each refused spec in `spec validate --json` says its exit code, like every other --json error document."""
    good, bad = SPECS / "tiny.yaml", Path(__file__).parent / "bad-typo.yaml"
    r = cli("spec", "validate", good, bad, "--json")
    assert r.exit_code == 2
    docs = json.loads(r.stdout)
    assert [d["ok"] for d in docs] == [True, False]
    assert docs[1]["exit"] == 2 and docs[1]["error"] and docs[1]["hint"]
