"""Emission builds every config as a ModelConfig; lint catches each broken repository."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from tests.conftest import Cli
from tests.helpers import fake_engine_dir, model_config
from tests.serving.conftest import write_tiny_spec
from toolchain.artifacts.cell import for_cell
from toolchain.errors import CheckpointError, OutputExistsError, TritonRepoError, UserInputError
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand
from toolchain.triton.emit import EngineInfo, emit_repository
from toolchain.triton.lint import lint_repository
from toolchain.triton.repository import emit_for_cell


def test_every_config_parses_back_with_no_placeholder(reference_repo: Path) -> None:
    names = sorted(p.parent.name for p in reference_repo.glob("*/config.pbtxt"))
    assert names == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"]
    for n in names:
        text = (reference_repo / n / "config.pbtxt").read_text()
        assert "${" not in text
        assert model_config(reference_repo, n).name == n


def test_tensorrt_llm_parameters_and_tensors_follow_the_backend_templates(reference_repo: Path) -> None:
    llm = model_config(reference_repo, "tensorrt_llm")
    p = {k: v.string_value for k, v in llm.parameters.items()}
    assert p["gpt_model_type"] == "inflight_fused_batching"
    assert p["enable_kv_cache_reuse"] == "true" and p["enable_chunked_context"] == "true"
    assert p["batch_scheduler_policy"] == "guaranteed_no_evict" and p["kv_cache_free_gpu_mem_fraction"] == "0.9"
    assert p["cuda_graph_mode"] == "true" and p["cuda_graph_cache_size"] == "4"
    assert p["exclude_input_in_output"] == "true" and p["max_beam_width"] == "1"
    assert "CPU reference model" in p["toolchain_reference"]
    assert llm.model_transaction_policy.decoupled and llm.max_batch_size == 8
    inputs = {i.name: i for i in llm.input}
    assert not inputs["input_lengths"].optional and not inputs["request_output_len"].optional
    assert inputs["input_ids"].allow_ragged_batch and list(inputs["stop_words_list"].dims) == [2, -1]
    assert inputs["streaming"].data_type == pb.TYPE_BOOL and inputs["seed"].data_type == pb.TYPE_UINT64
    outs = {o.name: o for o in llm.output}
    assert list(outs["output_ids"].dims) == [-1, -1] and outs["context_logits"].data_type == pb.TYPE_FP32
    assert {"kv_cache_reused_blocks", "num_output_tokens", "first_token_time_ns"} <= set(outs)
    ens = model_config(reference_repo, "ensemble")
    steps = {s.model_name: s for s in ens.ensemble_scheduling.step}
    assert steps["tensorrt_llm"].input_map["streaming"] == "stream"
    assert steps["postprocessing"].output_map["OUTPUT"] == "text_output"
    pre = {k: v.string_value for k, v in model_config(reference_repo, "preprocessing").parameters.items()}
    assert pre["tokenizer_dir"] == "../preprocessing/tokenizer"  # relative to the model's directory: relocatable
    assert (reference_repo / "preprocessing" / pre["tokenizer_dir"] / "tokenizer.json").is_file()
    meta = json.loads((reference_repo / "toolchain-repo.json").read_text())
    assert meta["reference"] is True and "not TensorRT-LLM" in meta["reference_note"]


def test_good_repository_lints_clean(reference_repo: Path) -> None:
    assert [f for f in lint_repository(reference_repo) if f.severity == "error"] == []


def _broken(reference_repo: Path, tmp_path: Path, model: str, edit: Callable[[str], str]) -> Path:
    repo = tmp_path / "broken"
    shutil.copytree(reference_repo, repo)
    p = repo / model / "config.pbtxt"
    p.write_text(edit(p.read_text()))
    return repo


@pytest.mark.parametrize(
    ("model", "edit", "expected"),
    [
        (
            "tensorrt_llm",
            lambda t: t.replace('string_value: "0.9"', 'string_value: "${kv_cache_free_gpu_mem_fraction}"'),
            "unfilled placeholder ${kv_cache_free_gpu_mem_fraction}",
        ),
        (
            "tensorrt_llm",
            lambda t: t.replace("max_batch_size: 8", "max_batch_size: 64", 1),
            "64 > engine max_batch_size 8",
        ),
        ("tensorrt_llm", lambda t: t.replace('"inflight_fused_batching"', '"inflight"'), "gpt_model_type"),
        ("tensorrt_llm", lambda t: t.replace('"guaranteed_no_evict"', '"fifo"'), "batch_scheduler_policy"),
        (
            "tensorrt_llm",
            lambda t: re.sub(r'(key: "enable_kv_cache_reuse"\s+value \{\s+string_value: )"true"', r'\1"yes"', t),
            "is not a boolean",
        ),
        ("ensemble", lambda t: t.replace('key: "streaming"', 'key: "streeming"'), "has no input streeming"),
        (
            "preprocessing",
            lambda t: re.sub(r'(key: "tokenizer_dir"\s+value \{\s+string_value: )"[^"]*"', r'\1"/nonexistent"', t),
            "no tokenizer at /nonexistent",
        ),
        (
            "tensorrt_llm",
            lambda t: t.replace(
                'name: "context_logits"\n  data_type: TYPE_FP32', 'name: "context_logits"\n  data_type: TYPE_FP16'
            ),
            "context_logits.data_type",
        ),
        ("postprocessing", lambda t: t.replace("name:", "nmae:", 1), "does not parse"),
    ],
)
def test_lint_catches_broken_repositories(
    reference_repo: Path, tmp_path: Path, model: str, edit: Callable[[str], str], expected: str
) -> None:
    repo = _broken(reference_repo, tmp_path, model, edit)
    lines = [f.line() for f in lint_repository(repo) if f.severity == "error"]
    assert any(expected in ln for ln in lines), lines


def test_kv_reuse_on_engine_without_paged_context_fmha(reference_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "r"
    shutil.copytree(reference_repo, repo)
    meta = json.loads((repo / "toolchain-repo.json").read_text())
    meta["engine"]["paged_context_fmha"] = False
    (repo / "toolchain-repo.json").write_text(json.dumps(meta))
    lines = [f.line() for f in lint_repository(repo)]
    assert any("--use_paged_context_fmha enable" in ln for ln in lines)


def test_emit_refuses_what_cannot_work(tiny_spec: Path, tmp_path: Path) -> None:
    cell = expand(load_spec(tiny_spec))[0]
    info = EngineInfo.predicted(cell)
    no_paged = EngineInfo(**{**info.__dict__, "paged_context_fmha": False})
    with pytest.raises(TritonRepoError, match="built without paged context FMHA") as e:
        src = cell.spec.local_source()
        assert src is not None
        emit_repository(cell, no_paged, src, tmp_path / "a", identity={}, reference=True)
    assert "trtllm-build --use_paged_context_fmha enable" in e.value.hint
    with pytest.raises(TritonRepoError, match="no tokenizer"):
        emit_repository(cell, info, tmp_path, tmp_path / "b", identity={}, reference=True)
    with pytest.raises(TritonRepoError, match="needs a local Hugging Face checkpoint"):  # its mount needs a source
        emit_repository(
            cell,
            info,
            cell.spec.local_source() or tmp_path,
            tmp_path / "m",
            identity={},
            reference=True,
            engines_root="/engines",
        )
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "other.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        emit_for_cell(for_cell(cell), "reference", tmp_path / "c")
    with pytest.raises(UserInputError, match="did not write"):  # --force replaces only a repository it wrote
        emit_for_cell(for_cell(cell), "reference", tmp_path / "c", force=True)
    assert (tmp_path / "c" / "other.txt").is_file()
    emit_for_cell(for_cell(cell), "reference", tmp_path / "d")
    emit_for_cell(for_cell(cell), "reference", tmp_path / "d", force=True)
    with pytest.raises(OutputExistsError):  # the same model too: replacing is what --force says
        emit_for_cell(for_cell(cell), "reference", tmp_path / "d")


def test_real_engine_dir_and_world_size(tiny_spec: Path, tmp_path: Path) -> None:
    cell = expand(load_spec(tiny_spec))[0]
    eng = fake_engine_dir(tmp_path / "engine")
    repo = Path(emit_for_cell(for_cell(cell), str(eng), tmp_path / "repo")["repository"])
    llm = model_config(repo, "tensorrt_llm")
    assert llm.backend == "tensorrtllm"
    assert llm.parameters["gpt_model_path"].string_value == str(repo / "tensorrt_llm" / "1" / "engine")
    assert [f.line() for f in lint_repository(repo) if f.severity == "error"] == []
    # the repository's engine copy loses a rank and claims TP2: lint sees both
    cfg = json.loads((repo / "tensorrt_llm/1/engine/config.json").read_text())
    cfg["pretrained_config"]["mapping"] = {"world_size": 2, "tp_size": 2, "pp_size": 1}
    (repo / "tensorrt_llm/1/engine/config.json").unlink()
    (repo / "tensorrt_llm/1/engine/config.json").write_text(json.dumps(cfg))
    lines = [f.line() for f in lint_repository(repo, world_size=1)]
    assert any("1 rank*.engine files for world size 2" in ln for ln in lines)
    assert any("launch world size 1 != engine world size 2" in ln for ln in lines)


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ({"tp": 2}, "mapping.tp_size: cell 1, engine 2"),
        ({"pp": 2}, "mapping.pp_size: cell 1, engine 2"),
        ({"batch": 16}, "build_config.max_batch_size: cell 8, engine 16"),
        ({"beam": 4}, "build_config.max_beam_width: cell 1, engine 4"),
        ({"seq": 512}, "build_config.max_seq_len: cell 256, engine 512"),
        ({"tokens_per_block": 64}, "plugin_config.tokens_per_block: cell 32, engine 64"),
        ({"kv": None}, "spec quantization.kv_cache 'fp8' but the engine's config.json has "),
        ({"kv": "INT8"}, "quantization.kv_cache_quant_algo INT8"),
    ],
)
def test_emit_refuses_an_engine_of_another_cell(
    tiny_spec: Path, tmp_path: Path, engine: dict[str, Any], expected: str
) -> None:
    cell = expand(load_spec(tiny_spec))[0]
    eng = fake_engine_dir(tmp_path / "engine", **engine)
    with pytest.raises(TritonRepoError, match="was not built for cell") as e:
        emit_for_cell(for_cell(cell), str(eng), tmp_path / "repo")
    assert expected in str(e.value)
    assert not (tmp_path / "repo").exists()


def _pytorch_spec(tmp_path: Path, ckpt: Path, **quant: Any) -> Path:
    import yaml

    spec = write_tiny_spec(tmp_path / "s.yaml", ckpt)
    d = yaml.safe_load(spec.read_text())
    d["runtime"] = "pytorch"
    d["quantization"].update(quant)
    spec.write_text(yaml.safe_dump(d))
    return spec


def test_pytorch_runtime_unquantized_ships_model_py_and_its_checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import yaml

    spec = _pytorch_spec(tmp_path, tiny_checkpoint, weights="bf16", kv_cache="auto")
    cell = expand(load_spec(spec))[0]
    res = emit_for_cell(for_cell(cell), "reference", tmp_path / "repo")
    assert res["layout"] == "llmapi" and res["mounts"] == []
    repo = tmp_path / "repo"
    cfg = model_config(repo, "tensorrt_llm")
    assert cfg.backend == "python" and cfg.max_batch_size == 0 and cfg.model_transaction_policy.decoupled
    my = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert my["triton_config"] == {"max_batch_size": 0, "decoupled": True} and my["backend"] == "pytorch"
    assert my["model"] == "model" and (repo / "tensorrt_llm" / "1" / "model" / "config.json").is_file()
    assert "class TritonPythonModel" in (repo / "tensorrt_llm" / "1" / "model.py").read_text()
    assert [f.line() for f in lint_repository(repo) if f.severity == "error"] == []
    # relocated: still whole
    shutil.move(repo, tmp_path / "moved")
    assert [f.line() for f in lint_repository(tmp_path / "moved") if f.severity == "error"] == []


def test_pytorch_runtime_with_engines_root_and_missing_checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import yaml

    spec = _pytorch_spec(tmp_path, tiny_checkpoint, weights="bf16", kv_cache="auto")
    cell = expand(load_spec(spec))[0]
    res = emit_for_cell(for_cell(cell), "reference", tmp_path / "repo", engines_root="/engines")
    my = yaml.safe_load((tmp_path / "repo" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert my["model"].startswith("/engines/")
    assert res["mounts"] == [{"source": str(tiny_checkpoint), "target": my["model"], "what": "checkpoint"}]
    findings = lint_repository(tmp_path / "repo")
    assert [f for f in findings if f.severity == "error"] == []
    assert any(f.severity == "warning" and "mounted under /engines" in f.message for f in findings)
    # a quantized spec whose checkpoint was never made: refused, instead of a model.yaml naming nothing
    quantized = _pytorch_spec(tmp_path, tiny_checkpoint)
    with pytest.raises(TritonRepoError, match="no Hugging Face checkpoint"):
        emit_for_cell(for_cell(expand(load_spec(quantized))[0]), "reference", tmp_path / "repo2")


def test_pytorch_runtime_refuses_a_tensorrt_engine_directory(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The LLM API loads a Hugging Face checkpoint; an engine directory also has a config.json, and was taken."""
    spec = _pytorch_spec(tmp_path, tiny_checkpoint, weights="bf16", kv_cache="auto")
    cell = expand(load_spec(spec))[0]
    eng = fake_engine_dir(tmp_path / "engine")
    with pytest.raises(TritonRepoError, match=r"holds a TensorRT engine, but spec .* runs on the PyTorch runtime"):
        emit_for_cell(for_cell(cell), str(eng), tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_pytorch_repository_carries_its_draft_and_adapters(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.yaml names the draft model and LoRA adapters relative to the model, and the repository holds
    them (measured before: the building host's absolute paths, and a pinned hf:// adapter lost its
    revision); an unpinned hf:// adapter is downloaded too (the LLM API's LoRA loader reads a local directory)."""
    import huggingface_hub
    import yaml

    adapter = tmp_path / "sql"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    hub = tmp_path / "hub-snapshot"
    hub.mkdir()
    (hub / "adapter_config.json").write_text('{"r": 4}')
    (hub / "adapter_model.safetensors").write_bytes(b"weights")
    asked: list[tuple[str, str | None]] = []

    def snapshot_download(repo: str, revision: str | None = None, **kw: Any) -> str:
        asked.append((repo, revision))
        return str(hub)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    spec = _pytorch_spec(tmp_path, tiny_checkpoint, weights="bf16", kv_cache="auto")
    d = yaml.safe_load(spec.read_text())
    d["target"] = {**d.get("target", {}), "trtllm_version": "1.2.1", "container": None}
    d["speculative"] = {"mode": "draft_target", "max_draft_len": 3, "draft": {"source": str(tiny_checkpoint)}}
    d["lora"] = {"adapters": ["./sql", "hf://org/pinned@abc123", "hf://org/floating"], "max_rank": 8}
    spec.write_text(yaml.safe_dump(d))
    cell = expand(load_spec(spec))[0]
    emit_for_cell(for_cell(cell), "reference", tmp_path / "repo")
    here = tmp_path / "repo" / "tensorrt_llm" / "1"
    text = (here / "model.yaml").read_text()
    my = yaml.safe_load(text)
    assert my["speculative_config"]["speculative_model"] == "draft"
    assert my["lora_config"]["lora_dir"] == ["lora/0-sql", "lora/1-pinned", "lora/2-floating"]
    assert (here / "draft" / "config.json").is_file()
    assert (here / "lora" / "0-sql" / "adapter_config.json").read_text() == '{"r": 8}'
    assert (here / "lora" / "1-pinned" / "adapter_config.json").read_text() == '{"r": 4}'
    assert asked == [("org/pinned", "abc123"), ("org/floating", None)]  # unpinned: the default branch, now
    assert str(tmp_path) not in text
    assert [f.line() for f in lint_repository(tmp_path / "repo") if f.severity == "error"] == []
    # lint reads the draft and adapters too: a carried one gone, or a host path, is reported
    shutil.rmtree(here / "lora" / "0-sql")
    my["speculative_config"]["speculative_model"] = str(tiny_checkpoint)  # a path of this host
    (here / "model.yaml").write_text(yaml.safe_dump(my))
    found = {(f.field, f.severity): f.message for f in lint_repository(tmp_path / "repo")}
    assert "LoRA adapter lora/0-sql does not exist here" in found[("lora_config.lora_dir[0]", "error")]
    assert "is a path on this host" in found[("speculative_config.speculative_model", "warning")]
    assert not any(k[0] in ("lora_config.lora_dir[1]", "lora_config.lora_dir[2]") for k in found)  # there / a hub id
    # a carried adapter without safetensors weights (a snapshot of *.json only) is refused, naming its field
    (hub / "adapter_model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"lora.adapters\[1\] \(hf://org/pinned@abc123\) has no adapter_model"):
        emit_for_cell(for_cell(cell), "reference", tmp_path / "repo2")
    assert not (tmp_path / "repo2").exists()


def test_cli_lint_exit_codes(cli: Cli, reference_repo: Path, tmp_path: Path) -> None:
    r = cli("triton", "lint", reference_repo)
    assert r.exit_code == 0, r.output
    repo = _broken(reference_repo, tmp_path, "tensorrt_llm", lambda t: t.replace('"inflight_fused_batching"', '"x"'))
    r = cli("triton", "lint", repo)
    assert r.exit_code == 2 and "set it to inflight_fused_batching" in r.output


def test_multi_gpu_launch_is_one_tritonserver_per_rank_under_mpirun(tmp_path: Path) -> None:
    from toolchain.triton.server import container_command

    net = ["--grpc-port=8001"]
    cmd = container_command(Path("/opt/tritonserver/bin/tritonserver"), tmp_path, net, "p_", 2)
    assert cmd[:2] == ["mpirun", "--allow-run-as-root"]
    ranks = " ".join(cmd[2:]).split(" : ")
    assert len(ranks) == 2 and all(r.startswith("-n 1 /opt/tritonserver/bin/tritonserver") for r in ranks)
    assert "--load-model=tensorrt_llm" not in ranks[0] and "--model-control-mode=explicit" in ranks[1]
    assert "shm-region-prefix-name=p_r0_" in ranks[0] and "shm-region-prefix-name=p_r1_" in ranks[1]
    single = container_command(Path("/opt/tritonserver/bin/tritonserver"), tmp_path, net, "p_", 1)
    assert single[0] == "/opt/tritonserver/bin/tritonserver" and "--disable-auto-complete-config" in single


def test_pytorch_runtime_hub_source_is_named_with_its_revision(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import yaml

    spec = _pytorch_spec(tmp_path, tiny_checkpoint, weights="bf16", kv_cache="auto")
    d = yaml.safe_load(spec.read_text())
    d["model"]["source"] = "hf://TinyLlama/TinyLlama-1.1B-Chat-v1.0@fe8a4ea1ffedaf415f4da2f062534de366a451e6"
    d["model"]["architecture"] = "llama-3.1-8b"
    spec.write_text(yaml.safe_dump(d))
    cell = expand(load_spec(spec))[0]
    res = emit_for_cell(for_cell(cell), "reference", tmp_path / "repo", engines_root="/engines")
    assert res["mounts"] == []  # the LLM API downloads a hub model where it runs
    my = yaml.safe_load((tmp_path / "repo" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert my["model"] == "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
    assert my["revision"] == "fe8a4ea1ffedaf415f4da2f062534de366a451e6"
    assert [f.line() for f in lint_repository(tmp_path / "repo") if f.severity == "error"] == []
