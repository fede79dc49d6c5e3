"""What `triton lint` says: one line per finding, once, in the user's words, with a fix that works."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tests.conftest import Cli
from toolchain.errors import TritonRepoError
from toolchain.triton.lint import lint_repository


def _copy(reference_repo: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(reference_repo, repo)
    return repo


def _rewrite(repo: Path, model: str, change: Any) -> None:
    p = repo / model / "config.pbtxt"
    cfg = text_format.Parse(p.read_text(), pb.ModelConfig())
    change(cfg)
    p.write_text(text_format.MessageToString(cfg))


def _set_param(key: str, value: str) -> Any:
    def change(cfg: Any) -> None:
        cfg.parameters[key].string_value = value

    return change


def test_missing_gpt_model_type_names_the_value_that_loads(reference_repo: Path, tmp_path: Path) -> None:
    repo = _copy(reference_repo, tmp_path)
    _rewrite(repo, "tensorrt_llm", lambda cfg: cfg.parameters.pop("gpt_model_type"))
    found = [f for f in lint_repository(repo) if f.field == "parameters.gpt_model_type"]
    assert len(found) == 1 and found[0].severity == "error", found
    assert found[0].message.startswith("missing") and "None" not in found[0].message
    assert 'string_value: "inflight_fused_batching"' in found[0].fix and "empty" not in found[0].fix


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("max_beam_width", "two", "a whole number"),
        ("enable_chunked_context", "yes", "a boolean (true or false)"),
        ("gpu_device_ids", "0-1", "a list of GPU ids"),
    ],
)
def test_type_names_are_the_users_words(reference_repo: Path, tmp_path: Path, key: str, value: str, words: str) -> None:
    repo = _copy(reference_repo, tmp_path)
    _rewrite(repo, "tensorrt_llm", _set_param(key, value))
    found = [f for f in lint_repository(repo) if f.field == f"parameters.{key}"]
    assert found and all(f.severity == "error" for f in found), found
    line = found[0].line()
    assert words in line, line
    assert not re.search(r"\b(int32|uint32|uint64|cpp_bool|python_bool|bls_bool|device_ids|int_list)\b", line), line


def test_negative_cuda_graph_cache_size_is_one_error(reference_repo: Path, tmp_path: Path) -> None:
    repo = _copy(reference_repo, tmp_path)
    _rewrite(repo, "tensorrt_llm", _set_param("cuda_graph_cache_size", "-1"))
    found = [f for f in lint_repository(repo) if f.field == "parameters.cuda_graph_cache_size"]
    assert [f.severity for f in found] == ["error"], [f.line() for f in found]


def test_draft_target_repository_gets_no_decoupled_advice(reference_repo: Path, tmp_path: Path) -> None:
    """A draft-target repository is never decoupled (speculative.py refuses it); lint must not advise it."""
    repo = _copy(reference_repo, tmp_path)
    shutil.copytree(repo / "tensorrt_llm", repo / "tensorrt_llm_draft")
    for model in ("tensorrt_llm", "tensorrt_llm_draft"):
        _rewrite(repo, model, lambda cfg: cfg.model_transaction_policy.__setattr__("decoupled", False))
    _rewrite(repo, "tensorrt_llm_draft", lambda cfg: cfg.__setattr__("name", "tensorrt_llm_draft"))
    lines = [f.line() for f in lint_repository(repo)]
    assert not [ln for ln in lines if "decoupled: true" in ln], lines
    # the same repository without the draft model is a plain one: the advice is right there
    shutil.rmtree(repo / "tensorrt_llm_draft")
    assert any("decoupled: true" in f.fix for f in lint_repository(repo))


def test_cli_prints_each_error_once_and_exits_2(cli: Cli, reference_repo: Path, tmp_path: Path) -> None:
    repo = _copy(reference_repo, tmp_path)
    _rewrite(repo, "postprocessing", lambda cfg: cfg.__setattr__("max_batch_size", -1))
    r = cli("triton", "lint", repo)
    assert r.exit_code == 2, r.output
    assert r.output.count("must be non-negative") == 1, r.output
    assert "listed above" in r.output and "Traceback" not in r.output


def test_missing_repository_is_one_error_line(cli: Cli, tmp_path: Path) -> None:
    with pytest.raises(TritonRepoError, match="does not exist"):
        lint_repository(tmp_path / "nope")
    r = cli("triton", "lint", tmp_path / "nope")
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and ": -:" not in lines[0] and "does not exist" in lines[0], r.output


def test_emit_help_says_what_the_engine_path_is(cli: Cli) -> None:
    """The emitted gpt_model_path is absolute (the tensorrtllm backend resolves no relative path against the
    repository): the help must not promise a repository free of host paths."""
    r = cli("triton", "emit", "--help")
    text = " ".join(r.output.split())
    assert "holds no path of this host" not in text
    assert "absolute" in text


@pytest.mark.slow
def test_lint_load_serves_the_repository_in_triton(cli: Cli, reference_repo: Path) -> None:
    r = cli("triton", "lint", reference_repo, "--load")
    assert r.exit_code == 0, r.output
    assert "Triton 2.51 loaded 5 of 5 model(s), 2 of 2 entry model(s) answered" in r.output


@pytest.mark.slow
def test_load_check_reports_what_triton_says_on_the_file(reference_repo: Path, tmp_path: Path) -> None:
    """A BLS input of another type loads and then fails the standard request: --load names the BLS config."""
    from toolchain.triton.loadcheck import load_check

    repo = _copy(reference_repo, tmp_path)

    def fp32(cfg: Any) -> None:
        next(i for i in cfg.input if i.name == "max_tokens").data_type = pb.TYPE_FP32

    _rewrite(repo, "tensorrt_llm_bls", fp32)
    res = load_check(repo)
    assert res.requests["ensemble"] == "answered" and res.requests["tensorrt_llm_bls"] != "answered"
    [f] = res.findings
    assert f.file.endswith("tensorrt_llm_bls/config.pbtxt") and "fails the standard request" in f.message
    # each model loads once: loading the ensemble does not load its composing models again (Triton's own log)
    loads = Counter(re.findall(r'"loading: ([^:"]+):\d+"', Path(res.log_path).read_text()))
    assert loads == dict.fromkeys(res.models, 1), loads


def test_spec_validate_lists_every_problem(cli: Cli, tiny_spec: Path, tmp_path: Path) -> None:
    import yaml

    d = yaml.safe_load(tiny_spec.read_text())
    d["serving"].update(streaming=True, decoupled=False)
    d["quantization"]["kv_cache"] = "int8"
    spec = tmp_path / "two.yaml"
    spec.write_text(yaml.safe_dump(d))
    r = cli("spec", "validate", spec)
    assert r.exit_code != 0
    text = " ".join(r.output.split())
    assert "serving.streaming needs the decoupled transaction policy" in text, text
    assert "an INT8 KV cache turns off paged context FMHA" in text, text
    assert "set serving.decoupled: true" in text and "more)" not in text.replace("more:", ""), text
