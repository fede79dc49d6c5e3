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


TYPO_REQUIRED = Path(__file__).parent / "bad-typo-required.yaml"


def test_a_typo_of_a_required_key_shows_the_unknown_key_and_its_did_you_mean(cli: Cli) -> None:
    """Issue 49: `max_batch_sizes:` under matrix said only "required key 'max_batch_size' is missing (+1 more)";
    the "+1 more" (the unknown key and its did-you-mean) was never shown, not even with --json."""
    r = cli("spec", "validate", TYPO_REQUIRED)
    assert r.exit_code == 2
    error = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(error) == 1 and len(r.output.strip().splitlines()) == 1, r.output
    line = error[0]
    assert "unknown key 'max_batch_sizes'; did you mean 'max_batch_size'?" in line, line
    assert "bad-typo-required.yaml:7 matrix.max_batch_sizes" in line, line
    assert "required key 'max_batch_size' is missing" in line and "more)" not in line, line


@pytest.mark.parametrize("argv", [("spec", "validate"), ("plan",), ("spec", "expand")])
def test_json_lists_every_problem_of_a_spec(cli: Cli, argv: tuple[str, ...]) -> None:
    r = cli(*argv, TYPO_REQUIRED, "--json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    if isinstance(doc, list):  # spec validate: one document per spec, with each problem as data
        (doc,) = doc
        problems = doc["problems"]
        assert problems[0] == {
            "message": "unknown key 'max_batch_sizes'; did you mean 'max_batch_size'?",
            "yaml_path": "matrix.max_batch_sizes",
            "line": 7,
            "key": "max_batch_sizes",
            "did_you_mean": "max_batch_size",
        }, problems
        assert [p["message"] for p in problems[1:]] == ["required key 'max_batch_size' is missing"], problems
    assert "did you mean 'max_batch_size'?" in doc["error"] and "'max_batch_size' is missing" in doc["error"], doc


def test_every_problem_is_in_the_error_in_order_unknown_keys_first() -> None:
    from toolchain.errors import SpecError
    from toolchain.specs.loader import parse_spec_text

    text = TYPO_REQUIRED.read_text().replace("quantization: {weights: fp8}", "quantization: {weigths: fp8}")
    with pytest.raises(SpecError) as e:
        parse_spec_text(text, "s.yaml")
    assert [(p.key, p.did_you_mean) for p in e.value.problems] == [
        ("weigths", "weights"),
        ("max_batch_sizes", "max_batch_size"),
        (None, None),
    ], e.value.problems
    for p in e.value.problems:
        assert p.message in e.value.message


def test_a_typo_of_a_required_key_on_a_terminal_at_80_columns(tmp_path: Path) -> None:
    """As a person sees it: one Error line naming the unknown key, its did-you-mean and the missing key."""
    import os
    import sys

    from tests.conftest import REPO
    from tests.terminal.pty_harness import run_on_pty

    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCHAIN_")}
    env |= {"PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "80", "HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "toolchain.cli.main", "spec", "validate", str(TYPO_REQUIRED)]
    r = run_on_pty(argv, env=env, timeout=120, cols=80)
    assert r.returncode == 2, r.describe()
    lines = [ln for ln in r.text.replace("\r", "").splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.describe()
    assert "did you mean 'max_batch_size'?" in lines[0] and "'max_batch_size' is missing" in lines[0], r.describe()
