"""TensorRT-LLM releases as data: the runtime default, the engine backend's removal in 1.3.0rc21, the
versions derived from a release's row, and the shipped specs on today's TensorRT-LLM.

The container table is held against tests/reference/triton_trtllm_containers.json, recorded from Triton's
compatibility matrix (its source is in the file), never from the product's own table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand
from toolchain.specs.rules import all_problems

REFERENCE = json.loads((Path(__file__).parents[1] / "reference" / "triton_trtllm_containers.json").read_text())


def _tiny(**changes: Any) -> dict[str, Any]:
    d: dict[str, Any] = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = "hf://org/tiny@0123456789abcdef0123456789abcdef01234567"
    d["model"]["architecture"] = "llama-3.1-8b"
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def _load(tmp_path: Path, d: dict[str, Any]) -> Any:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return load_spec(p)


@pytest.mark.parametrize(
    ("version", "runtime"),
    [
        ("1.0.0", "tensorrt"),
        ("1.1.0", "tensorrt"),
        ("1.2.0", "pytorch"),
        ("1.2.1", "pytorch"),
        ("1.3.0rc29", "pytorch"),
    ],
)
def test_an_omitted_runtime_is_pytorch_wherever_the_llm_api_is_supported(
    tmp_path: Path, version: str, runtime: str
) -> None:
    target = {"trtllm_version": version}
    spec = _load(tmp_path, _tiny(runtime=None, target=target))
    assert spec.runtime == runtime


def test_runtime_tensorrt_is_refused_on_the_1_3_line_with_the_reason_and_the_fix(tmp_path: Path) -> None:
    spec = _load(tmp_path, _tiny(runtime="tensorrt", target={"trtllm_version": "1.3.0rc29"}))
    lines = [p.line() for p in all_problems(spec)]
    assert any("removed in 1.3.0rc21" in x and "runtime: pytorch" in x and '"1.2.1"' in x for x in lines), lines


def test_runtime_tensorrt_on_1_2_1_derives_its_tensorrt_from_the_release(tmp_path: Path) -> None:
    spec = _load(tmp_path, _tiny(runtime="tensorrt", target={"trtllm_version": "1.2.1"}))
    assert spec.target.tensorrt_version is None
    assert spec.target.tensorrt() == REFERENCE["containers"]["26.04"]["tensorrt"]
    assert all_problems(spec) == []


def test_a_1_3_target_needs_no_tensorrt_version(tmp_path: Path) -> None:
    spec = _load(tmp_path, _tiny(target={"trtllm_version": "1.3.0rc29"}))
    assert spec.runtime == "pytorch" and spec.target.tensorrt() is None
    assert all_problems(spec) == []


def test_an_engine_release_without_a_known_tensorrt_asks_for_it(tmp_path: Path) -> None:
    spec = _load(tmp_path, _tiny(runtime="tensorrt", target={"trtllm_version": "1.2.0"}))
    assert any("target.tensorrt_version" in p.fix for p in all_problems(spec))


def test_the_release_table_gives_each_triton_container_its_tensorrt_llm() -> None:
    from toolchain.specs.releases import container_tags, triton_container

    want = {tag: (row["trtllm"], row["tensorrt"]) for tag, row in REFERENCE["containers"].items()}
    assert container_tags() == want
    assert triton_container("1.2.1") == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    assert triton_container("1.3.0rc29") is None  # no Triton container ships the 1.3 line


def test_release_ordering_puts_release_candidates_before_the_final() -> None:
    from toolchain.specs.releases import builds_engines, version_key

    assert version_key("1.3.0rc20") < version_key("1.3.0rc21") < version_key("1.3.0rc29") < version_key("1.3.0")
    assert builds_engines("1.2.1") and not builds_engines(REFERENCE["engine_backend_removed_in"]["version"])


def test_shipped_specs_run_todays_tensorrt_llm_and_keep_one_engine_example() -> None:
    runtimes: dict[str, str] = {}
    for path in sorted(SPECS.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        assert "runtime" in raw, f"{path.name} does not state its runtime"
        spec = load_spec(path)
        runtimes[path.name] = spec.runtime
        version = spec.target.trtllm_version
        if spec.dynamo is not None:
            assert version == REFERENCE["dynamo_1_6_pins"]["version"], path.name
        else:
            assert version == "1.2.1", f"{path.name} targets {version}, not the newest stable line"
        assert all_problems(spec, expand(spec)) == [], path.name
    engines = [name for name, rt in runtimes.items() if rt == "tensorrt"]
    assert engines == ["tiny-engine.yaml"], runtimes


def test_spec_validate_refuses_engines_on_1_3_in_one_line_and_in_json(cli: Cli, tmp_path: Path) -> None:
    p = tmp_path / "engines-on-1.3.yaml"
    p.write_text(yaml.safe_dump(_tiny(runtime="tensorrt", target={"trtllm_version": "1.3.0rc29"})))
    r = cli("spec", "validate", p)
    assert r.exit_code == 2 and "Traceback" not in r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert "TensorRT-LLM 1.3.0rc29 has no TensorRT engine backend" in line and "use runtime: pytorch" in line
    doc = json.loads(cli("spec", "validate", p, "--json").stdout)
    assert doc[0]["ok"] is False and doc[0]["exit"] == 2 and "removed in 1.3.0rc21" in doc[0]["error"]


def test_spec_validate_refuses_what_the_target_line_refuses_of_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Options the 1.2 line writes but the 1.3 line refuses (sampler_type is gone there) are a spec problem
    on a 1.3 target, said up front, not a failure when the runtime starts."""
    from toolchain.specs import llmapi

    real = llmapi._options
    monkeypatch.setattr(llmapi, "_options", lambda cell, **kw: {**real(cell, **kw), "sampler_type": "auto"})
    on_13 = _load(tmp_path, _tiny(target={"trtllm_version": "1.3.0rc29"}))
    lines = [p.line() for p in all_problems(on_13)]
    assert any("TensorRT-LLM 1.3.0rc29: sampler_type is refused by TensorRT-LLM 1.3" in x for x in lines), lines
