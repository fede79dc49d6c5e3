"""One gate at every door: each command that takes a spec refuses what `spec validate` refuses, with the same
one-line error and the table's alternative (issue 32, items 3, 4, 5, 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.specs import families


@pytest.fixture
def checkpoints(family_checkpoints: dict[str, Path]) -> dict[str, Path]:
    return family_checkpoints


def _spec(
    tmp: Path,
    ckpt: Path | None,
    runtime: str = "tensorrt",
    weights: str = "fp8",
    *,
    dynamo: bool = False,
    **serving: Any,
) -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    if ckpt is not None:
        d["model"]["source"] = str(ckpt)
    d["runtime"] = runtime
    d["quantization"]["weights"] = weights
    if weights != "fp8":  # an FP8 KV cache is for FP8 weights (the paged-context rule)
        d["quantization"]["kv_cache"] = "auto"
    if runtime == "pytorch":
        d["target"] = {"trtllm_version": "1.2.0", "tensorrt_version": "10.13.3"}
    d["serving"].update(serving)
    if dynamo:  # Dynamo serves runtime pytorch: the dynamo commands reach the gate with the spec they take
        d["dynamo"] = {"mode": "aggregated"}
    path = tmp / f"{ckpt.name if ckpt else 'src'}-{runtime}-{weights}.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


# Every command that reads a spec, as it is called (SPEC and OUT are filled in).
ENTRY_POINTS: list[tuple[str, ...]] = [
    ("spec", "expand", "SPEC"),
    ("quantize", "SPEC"),
    ("build", "SPEC", "--all", "--dry-run"),
    ("plan", "SPEC"),
    ("triton", "emit", "SPEC", "--reference", "--out", "OUT"),
    ("up", "SPEC"),
    ("deploy", "SPEC", "--out", "OUT"),
    ("matrix", "SPEC"),
    ("dynamo", "plan", "SPEC"),
    ("dynamo", "deploy", "SPEC", "--out", "OUT"),
    ("dynamo", "up", "SPEC"),
]


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("Error: ")]
    assert len(lines) == 1, output
    return lines[0]


def _all_refuse_like_validate(cli: Cli, spec: Path, tmp: Path) -> str:
    """Every entry point exits 2 with validate's error line, no traceback and nothing written; validate's line."""
    v = cli("spec", "validate", spec)
    assert v.exit_code == 2, v.output
    want = _error_line(v.output)
    for i, argv in enumerate(ENTRY_POINTS):
        out = tmp / f"out-{i}"
        args = [str(spec) if a == "SPEC" else str(out) if a == "OUT" else a for a in argv]
        res = cli(*args)
        assert res.exit_code == 2, (argv, res.output)
        assert "Traceback" not in res.output, (argv, res.output)
        assert _error_line(res.output) == want, (argv, res.output)
        assert not out.exists(), argv
    return want


REFUSED = [
    (f, r, w)
    for f in families.FAMILIES
    for r in families.RUNTIMES
    for w in ("fp8", "int4_awq", "bf16")
    if not families.verdict(families.FAMILIES[f], r, w).ok
]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "runtime", "weights"), REFUSED)
def test_every_entry_point_refuses_what_validate_refuses(
    cli: Cli, checkpoints: dict[str, Path], tmp_path: Path, family: str, runtime: str, weights: str
) -> None:
    line = _all_refuse_like_validate(
        cli, _spec(tmp_path, checkpoints[family], runtime, weights, dynamo=runtime == "pytorch"), tmp_path
    )
    v = families.verdict(families.FAMILIES[family], runtime, weights)
    assert line.endswith(f" — {v.fix}")  # the table's alternative, never the list of architectures


def test_a_family_the_table_does_not_name_is_refused_everywhere(
    cli: Cli, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    line = _all_refuse_like_validate(cli, _spec(tmp_path, checkpoints["gpt_neox"]), tmp_path)
    assert "gpt_neox" in line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("serving", "phrase"),
    [
        ({"cuda_graphs": {"enabled": True, "padding": True}}, "padding"),
        ({"cuda_graphs": {"enabled": True, "batch_sizes": [3, 5, 100]}}, "CUDA-graph batch size 100"),
        ({"cuda_graphs": {"enabled": True, "cache_size": 16}}, "16"),
    ],
    ids=["padding", "batch-size-above-max-batch", "cache-size-above-max-batch"],
)
def test_serving_rules_hold_at_every_entry_point(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, serving: dict[str, Any], phrase: str
) -> None:
    line = _all_refuse_like_validate(cli, _spec(tmp_path, tiny_checkpoint, **serving), tmp_path)
    assert phrase in line


@pytest.mark.parametrize("family", ["llama", "mixtral", "phi3"])
def test_reference_engine_on_runtime_pytorch_is_refused_up_front(
    cli: Cli, checkpoints: dict[str, Path], tmp_path: Path, family: str
) -> None:
    """The CPU reference model stands in for the tensorrtllm backend only: on runtime pytorch, `--engine
    reference` is refused at emit (not ignored, then a ModuleNotFoundError in the server log)."""
    spec = _spec(tmp_path, checkpoints[family], "pytorch")
    assert cli("spec", "validate", spec).exit_code == 0
    res = cli("triton", "emit", spec, "--reference", "--out", tmp_path / "repo")
    assert res.exit_code == 2, res.output
    line = _error_line(res.output)
    assert "runtime pytorch" in line and "--engine DIR" in line
    assert ("runtime: tensorrt" in line) == families.verdict(families.FAMILIES[family], "tensorrt", "fp8").ok
    assert not (tmp_path / "repo").exists()


CAVEATS = [
    (f, r)
    for f, fam in families.FAMILIES.items()
    for r in families.RUNTIMES
    if families.verdict(fam, r, "fp8").ok and families.verdict(fam, r, "fp8").reason
]


def test_the_table_has_a_caveat_to_warn_about() -> None:
    assert ("qwen2_moe", "pytorch") in CAVEATS


@pytest.mark.parametrize(("family", "runtime"), CAVEATS)
def test_validate_warns_for_a_yes_with_caveat(
    cli: Cli, checkpoints: dict[str, Path], tmp_path: Path, family: str, runtime: str
) -> None:
    import json

    spec = _spec(tmp_path, checkpoints[family], runtime)
    res = cli("spec", "validate", spec)
    assert res.exit_code == 0, res.output
    reason = families.verdict(families.FAMILIES[family], runtime, "fp8").reason
    assert f"warning: {families.FAMILIES[family].name} on runtime {runtime}: {reason}" in res.output
    js = cli("spec", "validate", spec, "--json")
    assert any(reason in w for w in json.loads(js.stdout)[0]["warnings"])
    plain = cli("spec", "validate", _spec(tmp_path, checkpoints["llama"], runtime))
    assert "warning:" not in plain.output
