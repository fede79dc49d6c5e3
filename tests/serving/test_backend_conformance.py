"""The repository against its consumer's rules (TensorRT-LLM 1.1 `inflight_batcher_llm`), not the toolchain's beliefs.

Each planted mistake is one the backend accepts silently (an ignored key, a value that falls back to a default)
or refuses at load; `triton lint` must refuse each. Expected rules come from upstream sources, restated here
from the files named (tests/reference/*.json and the literals below), never from toolchain.triton.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli
from tests.helpers import fake_engine_dir, model_config
from tests.serving.conftest import write_tiny_spec
from toolchain.artifacts.cell import for_cell
from toolchain.errors import TritonRepoError
from toolchain.specs.loader import load_spec, parse_spec_text
from toolchain.specs.matrix import expand
from toolchain.specs.rules import all_problems
from toolchain.triton.lint import lint_repository
from toolchain.triton.repository import emit_for_cell

REF_DIR = Path(__file__).resolve().parents[1] / "reference"
REQUIRED = json.loads((REF_DIR / "tensorrtllm_backend_required_parameters.json").read_text())
# model_state.cc@5cdd692 GetParameter<bool>: these strings only, anything else throws (and the caller's
# catch falls back to the default)
CPP_TRUE, CPP_FALSE = ("True", "true", "TRUE", "1"), ("False", "false", "FALSE", "0")


def _errors(repo: Path) -> list[str]:
    return [f.line() for f in lint_repository(repo) if f.severity == "error"]


def _warnings(repo: Path) -> list[str]:
    return [f.line() for f in lint_repository(repo) if f.severity == "warning"]


@pytest.fixture
def repo(reference_repo: Path, tmp_path: Path) -> Path:
    out = tmp_path / "repo"
    shutil.copytree(reference_repo, out)
    return out


def _edit(repo: Path, model: str, old: str, new: str) -> None:
    p = repo / model / "config.pbtxt"
    text = p.read_text()
    assert old in text, (model, old)
    p.write_text(text.replace(old, new, 1))


def _set(repo: Path, model: str, key: str, value: str) -> None:
    """Set (or add) one parameter, the rest of the config untouched."""
    from google.protobuf import text_format

    cfg = model_config(repo, model)
    cfg.parameters[key].string_value = value
    (repo / model / "config.pbtxt").write_text(text_format.MessageToString(cfg))


_add = _set


def test_the_emitted_repository_lints_clean_against_the_backend_table(reference_repo: Path) -> None:
    assert _errors(reference_repo) == []
    assert not any("unknown key" in w or "deprecated" in w for w in _warnings(reference_repo))


@pytest.mark.parametrize(
    ("model", "old", "new", "expected"),
    [
        ("tensorrt_llm", '"enable_kv_cache_reuse"', '"enable_kv_cache_resue"', "did you mean 'enable_kv_cache_reuse'"),
        (
            "tensorrt_llm",
            '"enable_chunked_context"',
            '"enable_chunked_contex"',
            "did you mean 'enable_chunked_context'",
        ),
        ("tensorrt_llm", '"cuda_graph_mode"', '"cuda_graphs_mode"', "did you mean 'cuda_graph_mode'"),
        ("tensorrt_llm", '"batch_scheduler_policy"', '"scheduler_policy"', "did you mean 'batch_scheduler_policy'"),
        ("preprocessing", '"add_special_tokens"', '"add_special_token"', "did you mean 'add_special_tokens'"),
        ("postprocessing", '"skip_special_tokens"', '"skip_special_token"', "did you mean 'skip_special_tokens'"),
        ("tensorrt_llm_bls", '"accumulate_tokens"', '"accumulate_token"', "did you mean 'accumulate_tokens'"),
    ],
)
def test_a_key_typo_the_backend_would_ignore_is_an_error_with_did_you_mean(
    repo: Path, model: str, old: str, new: str, expected: str
) -> None:
    _edit(repo, model, old, new)
    errors = _errors(repo)
    assert any("unknown key" in e and expected in e for e in errors), errors


@pytest.mark.parametrize(
    ("model", "key", "value", "expected"),
    [
        ("tensorrt_llm", "cuda_graph_cache_size", "four", "'four' is not a whole number"),
        ("tensorrt_llm", "cuda_graph_cache_size", "4x", "reads only its leading 4"),
        ("tensorrt_llm", "decoding_mode", "topk", "'topk' is not one of 'top_k', 'top_p', 'top_k_top_p'"),
        ("tensorrt_llm", "gpu_device_ids", "0;x", "is not GPU ids"),
        ("tensorrt_llm", "enable_kv_cache_reuse", "yes", "'yes' is not a boolean"),
        ("tensorrt_llm", "batch_scheduler_policy", "fcfs", "'max_utilization', 'guaranteed_no_evict'"),
        ("tensorrt_llm", "kv_cache_free_gpu_mem_fraction", "1.5", "outside (0.0, 1.0]"),
        ("tensorrt_llm_bls", "tensorrt_llm_model_name", "tensorrt_lm", "did you mean 'tensorrt_llm'"),
        ("preprocessing", "add_special_tokens", "maybe", "'maybe' is not a boolean"),
    ],
)
def test_a_value_the_model_cannot_parse_is_an_error_naming_what_it_accepts(
    repo: Path, model: str, key: str, value: str, expected: str
) -> None:
    _set(repo, model, key, value)
    errors = _errors(repo)
    assert any(f"parameters.{key}" in e and expected in e for e in errors), errors


def test_unknown_rejected_and_deprecated_keys(repo: Path) -> None:
    _add(repo, "tensorrt_llm", "my_own_knob", "1")
    _add(repo, "tensorrt_llm", "worker_path", "/opt/x")
    _add(repo, "tensorrt_llm", "enable_trt_overlap", "false")
    errors, warnings = _errors(repo), _warnings(repo)
    assert any("parameters.my_own_knob: unknown key" in e for e in errors), errors
    assert any("parameters.worker_path" in e and "executor_worker_path" in e for e in errors), errors
    # 1.1 reads enable_trt_overlap only to log that it is deprecated and ignored
    assert any("parameters.enable_trt_overlap: deprecated" in w for w in warnings), warnings


def test_guided_decoding_without_its_tokenizer_info_is_an_error(repo: Path) -> None:
    _set(repo, "tensorrt_llm", "guided_decoding_backend", "xgrammar")
    assert any("silently turns guided decoding off" in e for e in _errors(repo))
    _set(repo, "tensorrt_llm", "xgrammar_tokenizer_info_path", "/nonexistent/info.json")
    assert any("xgrammar_tokenizer_info_path" in e and "does not exist" in e for e in _errors(repo))


def test_the_table_knows_every_parameter_upstream_requires_and_its_boolean_rule() -> None:
    from toolchain.triton import parameters as P

    table = P.keys("tensorrt_llm")
    for row in REQUIRED["parameters"]:
        assert table[row["name"]]["mandatory"], row["name"]
    true, false = P.bool_values("cpp_bool")
    assert (tuple(true), tuple(false)) == (CPP_TRUE, CPP_FALSE)
    assert all(P.parse_bool("cpp_bool", v) is None for v in ("yes", "on", "t", "tRuE", " true"))
    src = P.table()["sources"]
    assert src["repository"] == "NVIDIA/TensorRT-LLM" and "v1.1.0" in src["release"]


def test_a_config_with_only_a_name_is_refused(tmp_path: Path, cli: Cli) -> None:
    """Issue 23 item 4: `name: "m"` alone linted as 'ok, 0 warnings'."""
    (tmp_path / "r" / "m").mkdir(parents=True)
    (tmp_path / "r" / "m" / "config.pbtxt").write_text('name: "m"\n')
    errors = _errors(tmp_path / "r")
    assert any("neither a backend nor a platform" in e for e in errors), errors
    assert any("no version directory" in e for e in errors), errors
    assert any("no TensorRT-LLM model" in e for e in errors), errors
    r = cli("triton", "lint", tmp_path / "r")
    assert r.exit_code == 2 and "Error:" in r.output and "ok:" not in r.output


def test_a_config_whose_name_is_not_its_directory_is_refused(repo: Path) -> None:
    _edit(repo, "postprocessing", 'name: "postprocessing"', 'name: "postprocess"')
    assert any("differs from its directory 'postprocessing'" in e for e in _errors(repo))


# --- CUDA graphs (item 4, 5) ---------------------------------------------------------------------------------


def _powers_of_two_up_to(n: int) -> list[int]:
    """The schema's promise ("powers of 2 up to max batch"), restated here: 1, 2, 4, ... < n, and n."""
    out = [2**i for i in range(n.bit_length()) if 2**i < n]
    return [*out, n]


def test_cuda_graphs_enabled_without_batch_sizes_keeps_a_graph_per_batch_size(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = write_tiny_spec(tmp_path / "s.yaml", tiny_checkpoint, cuda_graphs={"enabled": True})
    cell = expand(load_spec(spec))[0]
    repo = Path(emit_for_cell(for_cell(cell), "reference", tmp_path / "repo")["repository"])
    p = model_config(repo, "tensorrt_llm").parameters
    assert p["cuda_graph_mode"].string_value == "true"
    # upstream: the runtime keeps min(max_batch_size, max(cuda_graph_cache_size, 1)) graphs, LRU by batch state;
    # 0 kept one graph, recaptured at every change of the decode batch
    want = len(_powers_of_two_up_to(cell.max_batch_size))
    assert int(p["cuda_graph_cache_size"].string_value) == want > 1
    assert "enable_trt_overlap" not in p
    assert not any("cuda_graph" in w for w in _warnings(repo))


def test_cuda_graph_knobs_the_runtime_cannot_read_are_refused_with_the_reason() -> None:
    base = {
        "name": "g",
        "model": {"source": "hf://org/model@main", "architecture": "llama-3.1-8b"},
        "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
        "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [8], "max_seq_len": [1024]},
    }

    def problems(**serving: Any) -> list[str]:
        spec = parse_spec_text(yaml.safe_dump({**base, "serving": serving}))
        return [p.line() for p in all_problems(spec)]

    assert any("cannot pad" in p for p in problems(cuda_graphs={"enabled": True, "padding": True}))
    assert not any("pad" in p for p in problems(cuda_graphs={"enabled": True}))
    assert any("keeps at most 8 graphs" in p for p in problems(cuda_graphs={"enabled": True, "cache_size": 16}))
    pytorch = {**base, "runtime": "pytorch", "target": {"trtllm_version": "1.2.1", "tensorrt_version": "10.13.3"}}
    spec = parse_spec_text(yaml.safe_dump({**pytorch, "serving": {"cuda_graphs": {"cache_size": 4}}}))
    assert any("no graph cache size" in p.line() for p in all_problems(spec))


def test_lint_warns_about_a_graph_cache_of_zero(repo: Path) -> None:
    _set(repo, "tensorrt_llm", "cuda_graph_cache_size", "0")
    assert any("keeps a single graph" in w for w in _warnings(repo))


# --- draft-target (item 6) -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("serving", "expected"),
    [
        ({"enable_prefix_caching": False}, "KV cache block reuse must be enabled"),
        ({"exclude_input_in_output": False}, "generated tokens only"),
        ({"decoupled": True}, "none of the three can be decoupled"),
    ],
)
def test_draft_target_refuses_serving_values_it_would_otherwise_override(
    serving: dict[str, Any], expected: str
) -> None:
    d = {
        "name": "d",
        "model": {"source": "hf://org/model@main", "architecture": "llama-3.1-8b"},
        "target": {"trtllm_version": "1.1.0", "tensorrt_version": "10.13.3"},
        "matrix": {"gpu": ["H100-SXM"], "max_batch_size": [4], "max_seq_len": [1024]},
        "serving": {"streaming": False, "decoupled": False, **serving},
        "speculative": {"mode": "draft_target", "max_draft_len": 4, "draft": {"source": "hf://org/draft@main"}},
    }
    spec = parse_spec_text(yaml.safe_dump(d))
    assert any(expected in p.line() for p in all_problems(spec))
    from tests.serving.test_speculative_repo import configs
    from toolchain.triton.speculative import apply_features

    with pytest.raises(TritonRepoError, match="draft-target, which needs serving"):
        apply_features(configs(), expand(spec)[0], draft_model_path="/engines/draft")


# --- the engine the repository serves (items 7, 9) -----------------------------------------------------------


def test_a_copied_repository_that_serves_the_originals_engine_is_an_error(tiny_spec: Path, tmp_path: Path) -> None:
    cell = expand(load_spec(tiny_spec))[0]
    repo = Path(
        emit_for_cell(for_cell(cell), str(fake_engine_dir(tmp_path / "engine")), tmp_path / "repo")["repository"]
    )
    assert _errors(repo) == []
    subprocess.run(["cp", "-a", str(repo), str(tmp_path / "copy")], check=True)
    errors = _errors(tmp_path / "copy")
    assert any("lies outside this repository" in e and str(repo) in e for e in errors), errors
    assert _errors(repo) == []  # the original still serves its own engine


def test_lint_refuses_an_engine_whose_kv_dtype_is_not_the_specs(tiny_spec: Path, tmp_path: Path) -> None:
    cell = expand(load_spec(tiny_spec))[0]  # quantization.kv_cache: fp8
    repo = Path(
        emit_for_cell(for_cell(cell), str(fake_engine_dir(tmp_path / "engine")), tmp_path / "repo")["repository"]
    )
    cfg_path = repo / "tensorrt_llm" / "1" / "engine" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["pretrained_config"]["quantization"]["kv_cache_quant_algo"] = None
    cfg_path.unlink()  # a hard link to the source engine's file: replace, do not edit in place
    cfg_path.write_text(json.dumps(cfg))
    errors = _errors(repo)
    assert any("quantization.kv_cache 'fp8'" in e and "kv_cache_quant_algo none" in e for e in errors), errors


def test_values_the_runtime_refuses_at_start_are_errors(tiny_spec: Path, tmp_path: Path) -> None:
    """trtGptModelInflightBatching.cpp: crossKvCacheFraction only for encoder-decoder models; KV blocks must be
    onboarded when the engine has paged context FMHA."""
    cell = expand(load_spec(tiny_spec))[0]
    repo = Path(
        emit_for_cell(for_cell(cell), str(fake_engine_dir(tmp_path / "engine")), tmp_path / "repo")["repository"]
    )
    _set(repo, "tensorrt_llm", "cross_kv_cache_fraction", "0.5")
    _set(repo, "tensorrt_llm", "kv_cache_onboard_blocks", "false")
    errors = _errors(repo)
    assert any("parameters.cross_kv_cache_fraction: set for a decoder-only model" in e for e in errors), errors
    assert any("parameters.kv_cache_onboard_blocks: false with an engine" in e for e in errors), errors
