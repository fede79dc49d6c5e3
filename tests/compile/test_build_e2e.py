"""End to end on CPU with the trtllm-build stand-in: build once, cache, rebuild only on build fields."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.artifacts.cell import for_cell
from toolchain.artifacts.recipe import recipe_from_spec
from toolchain.artifacts.source import source_dir
from toolchain.compile.engine import build_cell
from toolchain.errors import BuildDriftError, CheckpointError, EngineBuildError, NeedsGPUError
from toolchain.quantize.run import quantize
from toolchain.registry import open_registry
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand

pytestmark = pytest.mark.slow
FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "py"))


def _spec(tmp_path: Path, ckpt: Path, **changes: Any) -> Path:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["quantization"]["calibration"].update(samples=8, seq_len=32)
    for path, value in changes.items():
        node = d
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    out = tmp_path / f"spec-{abs(hash(json.dumps(changes, sort_keys=True)))}.yaml"
    out.write_text(yaml.safe_dump(d))
    return out


def _quantized_cell(spec_path: Path) -> Cell:
    spec = load_spec(spec_path)
    cell = expand(spec)[0]
    out = for_cell(cell).quantized_dir
    if not out.exists():
        quantize(source_dir(spec), recipe_from_spec(spec), out, reuse=True)
    return cell


def test_built_once_cached_then_rebuilt_only_for_build_fields(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    first = build_cell(for_cell(cell), reg)
    assert first.status == "built"
    m = reg.show(first.key)
    assert {"config.json", "rank0.engine", "toolchain-build.log"} <= set(m.files)
    prov = m.provenance
    assert prov["tensorrt_llm"] == "1.2.1" and prov["tensorrt"].startswith("10.14.1")
    assert prov["cell"]["gpu"] == "H100-SXM" and prov["command"][0] == "trtllm-build"
    assert prov["container_image"] == "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3"
    assert build_cell(for_cell(cell), reg).status == "cached"
    # runtime field: same key, still cached
    rt = _quantized_cell(_spec(tmp_path, tiny_checkpoint, **{"serving.kv_cache_free_gpu_mem_fraction": 0.5}))
    assert build_cell(for_cell(rt), reg).status == "cached"
    # build field: new key, rebuilt (timing cache from the first build is reused)
    bf = _quantized_cell(_spec(tmp_path, tiny_checkpoint, **{"build.max_num_tokens": 512}))
    second = build_cell(for_cell(bf), reg)
    assert second.status == "built" and second.key != first.key
    assert "--input_timing_cache" in second.command
    assert build_cell(for_cell(cell), reg, force=True).status == "built"


def test_failed_build_publishes_nothing(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    monkeypatch.setenv("FAKE_TRTLLM_FAIL", "1")
    with pytest.raises(EngineBuildError) as e:
        build_cell(for_cell(cell), reg)
    assert e.value.returncode == 1 and e.value.log_path and e.value.log_path.is_file()
    assert "out of memory" in e.value.message and "nothing was published" in e.value.message
    assert reg.keys() == []


def test_killed_build_publishes_nothing(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    monkeypatch.setenv("FAKE_TRTLLM_SLEEP", "30")
    with pytest.raises(EngineBuildError):
        build_cell(for_cell(cell), reg, timeout=1)
    assert reg.keys() == []


def test_drift_is_loud(stand_in: None, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    monkeypatch.setenv("FAKE_TRTLLM_DRIFT", "1")
    with pytest.raises(BuildDriftError, match="max_batch_size: asked 8, engine has 9"):
        build_cell(for_cell(cell), reg)
    assert reg.keys() == []


def test_checkpoint_that_does_not_match_the_spec(stand_in: None, tiny_checkpoint: Path, tmp_path: Path) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    cfg_path = for_cell(cell).quantized_dir / "trtllm" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization"]["quant_algo"] = "W4A16_AWQ"
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no complete quantized checkpoint"):
        build_cell(for_cell(cell), reg)  # the manifest digest no longer matches: not a complete checkpoint
    from toolchain.compile.engine import check_checkpoint

    with pytest.raises(CheckpointError, match=r"quant_algo 'W4A16_AWQ' != 'FP8' for fp8"):
        check_checkpoint(cell, cfg_path.parent)


def test_without_trtllm_says_so_and_prints_the_command(tiny_checkpoint: Path, tmp_path: Path, cli: Cli) -> None:
    spec = _spec(tmp_path, tiny_checkpoint)
    _quantized_cell(spec)
    r = cli("build", spec, "--all", "--registry", tmp_path / "reg")
    assert r.exit_code == 4
    assert "trtllm-build is not installed here" in r.output and "--max_batch_size 8" in r.output
    r = cli("build", spec, "--all", "--dry-run", "--registry", tmp_path / "reg", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["cells"][0]["status"] == "planned"
    r = cli("build", spec, "--all", "--dry-run", "--registry", tmp_path / "reg")
    assert r.exit_code == 0 and "planned" in r.stdout and "trtllm-build --checkpoint_dir" in r.stdout  # data: stdout
    r = cli("build", spec, "--all", "--registry", tmp_path / "reg", "--json")
    assert r.exit_code == 4  # JSON for machines even when the build cannot run here
    cells = json.loads(r.stdout)["cells"]
    assert cells[0]["status"] == "needs-gpu" and "trtllm-build is not installed" in cells[0]["error"]


def test_build_reports_log_path_elapsed_and_last_line(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TRTLLM_SLEEP", "2.5")
    cell = _quantized_cell(_spec(tmp_path, tiny_checkpoint))
    seen: list[tuple[str, float | None, str, str | None]] = []

    def progress(stage, done=None, total=None, *, unit="", message=None):  # type: ignore[no-untyped-def]
        seen.append((stage, done, unit, message))

    res = build_cell(for_cell(cell), open_registry(str(tmp_path / "reg")), progress=progress)
    assert res.status == "built"
    assert seen[0][0].startswith("trtllm-build for cell") and str(res.log_path) in seen[0][0]  # log path first
    beats = [s for s in seen if s[2] == "s"]
    assert len(beats) >= 2 and beats[-1][1] is not None and beats[-1][1] >= 1.5  # silence never exceeds ~1 s
    assert beats[0][3] is not None and beats[0][3].startswith("$ trtllm-build")  # the latest log line


def test_pytorch_runtime_publishes_a_cold_bundle_without_a_gpu(tiny_checkpoint: Path, tmp_path: Path) -> None:
    reg = open_registry(str(tmp_path / "reg"))
    cell = _quantized_cell(
        _spec(
            tmp_path, tiny_checkpoint, runtime="pytorch", **{"target.trtllm_version": "1.2.1", "target.container": None}
        )
    )
    res = build_cell(for_cell(cell), reg)
    assert res.status == "published" and res.bundle == "cold"
    assert any(n.startswith("cold bundle: TensorRT-LLM is not installed here") for n in res.notes), res.notes
    m = reg.show(res.key)
    assert m.kind == "llmapi-bundle" and "hf/hf_quant_config.json" in m.files and "bundle.json" in m.files
    reg.get(res.key, tmp_path / "art")
    manifest = json.loads((tmp_path / "art" / "bundle.json").read_text())
    assert manifest["state"] == "cold" and manifest["caches"] == [] and manifest["env"] == {}
    made = manifest["made_for"]
    assert made["gpu"] == cell.gpu.nvml_name and made["trtllm_version"] == "1.2.1"
    assert made["shape"]["max_batch_size"] == 8 and made["shape"]["tp"] == 1
    opts = yaml.safe_load((tmp_path / "art" / "extra_llm_api_options.yaml").read_text())
    assert opts["max_batch_size"] == 8 and opts["kv_cache_config"]["enable_block_reuse"] is True
    # --force replaces a profile whose content differs under the same key (an older options file, say)
    (tmp_path / "art" / "extra_llm_api_options.yaml").write_text("max_batch_size: 1\n")
    reg.put(res.key, tmp_path / "art", kind="llmapi-profile", force=True)
    assert build_cell(for_cell(cell), reg, force=True).status == "published"
    reg.get(res.key, tmp_path / "again")
    assert yaml.safe_load((tmp_path / "again" / "extra_llm_api_options.yaml").read_text())["max_batch_size"] == 8


def test_unquantized_checkpoint_goes_through_convert_checkpoint(
    stand_in: None, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRTLLM_ROOT", str(FAKES / "trtllm_root"))
    spec = _spec(tmp_path, tiny_checkpoint, **{"quantization.weights": "bf16", "quantization.kv_cache": "auto"})
    cell = expand(load_spec(spec))[0]
    reg = open_registry(str(tmp_path / "reg"))
    res = build_cell(for_cell(cell), reg)
    assert res.status == "built"
    assert "convert_checkpoint.py" in res.notes[-1] and "--dtype bfloat16" in res.notes[-1]
    prov = reg.show(res.key).provenance
    assert "convert_checkpoint.py" in prov["converter"]
    assert "--gemm_plugin" in prov["command"] and prov["command"][prov["command"].index("--gemm_plugin") + 1] == "auto"
    monkeypatch.setenv("TRTLLM_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(NeedsGPUError, match="converter"):
        build_cell(for_cell(cell), reg, force=True)


def test_pytorch_artifact_carries_its_local_draft_and_adapters(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The published LLM-API artifact is served on another host: a local draft model and local LoRA adapters
    travel inside it, named relative to it (measured before: absolute paths of the building host)."""
    adapter = tmp_path / "sql"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    spec = _spec(
        tmp_path,
        tiny_checkpoint,
        runtime="pytorch",
        **{
            "target.trtllm_version": "1.2.1",
            "target.container": None,
            "lora": {"adapters": ["./sql"], "max_rank": 8},
            "speculative": {"mode": "draft_target", "max_draft_len": 3, "draft": {"source": str(tiny_checkpoint)}},
            "serving.streaming": False,
            "serving.decoupled": False,
        },
    )
    reg = open_registry(str(tmp_path / "reg"))
    res = build_cell(for_cell(_quantized_cell(spec)), reg)
    reg.get(res.key, tmp_path / "art")
    text = (tmp_path / "art" / "extra_llm_api_options.yaml").read_text()
    opts = yaml.safe_load(text)
    assert opts["speculative_config"]["speculative_model"] == "draft"
    assert opts["lora_config"]["lora_dir"] == ["lora/0-sql"]
    assert (tmp_path / "art" / "draft" / "config.json").is_file()
    assert (tmp_path / "art" / "lora" / "0-sql" / "adapter_config.json").is_file()
    assert str(tmp_path) not in text and str(tiny_checkpoint) not in text


@pytest.mark.parametrize(
    ("target", "installed", "ok"),
    [
        ("10.13.3", "10.13.3.9", True),
        ("10.13", "10.13.3.9", True),
        ("10.1", "10.13.3.9", False),
        ("10.13.3", "10.13.30", False),
    ],
)
def test_installed_tensorrt_matches_the_target_by_version_parts(target: str, installed: str, ok: bool) -> None:
    """A spec targeting TensorRT "10.1" used to be taken as matching an installed 10.13.3.9 (a string prefix)."""
    from toolchain.compile.engine import _check_versions
    from toolchain.errors import CompatibilityError

    cell = expand(load_spec(SPECS / "llama-3.1-8b-fp8.yaml"))[0]
    spec = cell.spec.model_copy(update={"target": cell.spec.target.model_copy(update={"tensorrt_version": target})})
    cell = Cell(**{**cell.__dict__, "spec": spec})
    versions: dict[str, str | None] = {"tensorrt_llm": spec.target.trtllm_version, "tensorrt": installed}
    if ok:
        _check_versions(cell, versions)
    else:
        with pytest.raises(CompatibilityError, match="installed TensorRT is"):
            _check_versions(cell, versions)
