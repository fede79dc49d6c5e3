"""The LLM-API options the product writes, checked against an independent oracle of TensorRT-LLM's argument model.

The oracle (tests/reference/llm_args/*.json, README there) was transcribed from upstream
``tensorrt_llm/llmapi/llm_args.py`` for the 1.2 and 1.3 lines. Expectations come only from those files: this
module never reads the product's key tables (``toolchain.specs.llmapi.TOP`` and friends), only the options it
generates for each cell.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS
from toolchain.specs.llmapi import llmapi_options
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

ORACLE_DIR = Path(__file__).resolve().parents[1] / "reference" / "llm_args"
LINES = {"1.2": "1.2.json", "1.3": "1.3.0rc.json"}

Oracle = dict[str, Any]
Field = dict[str, Any]


@cache
def load_oracle(line: str) -> Oracle:
    data: Oracle = json.loads((ORACLE_DIR / LINES[line]).read_text())
    return data


def line_of(trtllm_version: str) -> str | None:
    """1.2.x -> '1.2', 1.3.x (release candidates included) -> '1.3', anything else -> None."""
    major_minor = ".".join(trtllm_version.split(".")[:2])
    return major_minor if major_minor in LINES else None


# ------------------------------------------------------------------------------------------------ type strings


def _split_args(inner: str) -> list[str]:
    """Split the arguments of ``X[a, b[c, d], e]`` at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _generic(t: str) -> tuple[str, list[str]]:
    if "[" not in t:
        return t, []
    head, rest = t.split("[", 1)
    return head, _split_args(rest[:-1])


INTS = {"int": None, "StrictInt": None, "NonNegativeInt": 0, "PositiveInt": 1}
FLOATS = {"float": None, "NonNegativeFloat": 0}
STRINGS = {"str", "Path"}
ANYTHING = {"object", "Any", "TokenizerBase", "PreTrainedTokenizerBase"}
# Enum classes (StrEnum / Enum) whose values the oracle lists under "enum": YAML carries a string.
ENUMS = {
    "CapacitySchedulerPolicy",
    "ContextChunkingPolicy",
    "WaitingQueuePolicy",
    "SamplerType",
    "LoadFormat",
    "AdvancedSamplingMode",
    "PrefillCudaGraphBackend",
}


def type_accepts(t: str, value: Any) -> bool:
    """Whether a YAML value fits the oracle's type string (pydantic's lax coercions aside: an int field takes no
    bool and no string, which is stricter than upstream and what the product should write anyway)."""
    head, args = _generic(t.strip())
    if head == "Optional":
        return value is None or type_accepts(args[0], value)
    if head == "Union":
        return any(type_accepts(a, value) for a in args)
    if head in ("List", "Set", "Tuple", "list"):
        return isinstance(value, list) and (not args or all(type_accepts(args[0], v) for v in value))
    if head in ("Dict", "dict"):
        return isinstance(value, dict) and (len(args) < 2 or all(type_accepts(args[1], v) for v in value.values()))
    if head == "Literal":
        return isinstance(value, (str, bool, int))
    if head in INTS:
        low = INTS[head]
        return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)
    if head in FLOATS:
        low = FLOATS[head]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok and (low is None or value >= low)
    if head == "bool":
        return isinstance(value, bool)
    if head in STRINGS or head in ENUMS:
        return isinstance(value, str)
    if head in ANYTHING:
        return True
    return isinstance(value, dict)  # a nested config class


def _nested_class(t: str) -> bool:
    head, args = _generic(t.strip())
    if head in ("Optional", "Union"):
        return any(_nested_class(a) for a in args)
    return head[:1].isupper() and head not in ENUMS | ANYTHING | STRINGS | set(INTS) | set(FLOATS) | {
        "Literal",
        "List",
        "Set",
        "Tuple",
        "Dict",
    }


# ------------------------------------------------------------------------------------------------ the checker


def _within(op: str, value: float, bound: float) -> bool:
    return {"ge": value >= bound, "gt": value > bound, "le": value <= bound, "lt": value < bound}[op]


def _check_field(oracle: Oracle, path: str, spec: Field, value: Any, problems: list[str], notes: list[str]) -> None:
    if spec.get("status") == "deprecated" or "deprecated_message" in spec:
        notes.append(f"{path}: deprecated upstream ({spec.get('deprecated_message', 'status deprecated')})")
    if spec.get("python_only") and value is not None:
        problems.append(f"{path}: a Python object upstream; a YAML file cannot carry it")
        return
    if not type_accepts(spec["type"], value):
        problems.append(f"{path}: {value!r} does not fit upstream type {spec['type']}")
        return
    if value is None:
        return
    enum = spec.get("enum")
    if enum is not None and not isinstance(value, (dict, list)):
        probe = value.upper() if spec.get("enum_case_insensitive") and isinstance(value, str) else value
        allowed = [e.upper() if spec.get("enum_case_insensitive") and isinstance(e, str) else e for e in enum]
        if probe not in allowed:
            problems.append(f"{path}: {value!r} is not one of {enum}")
            return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for op in ("ge", "gt", "le", "lt"):
            if op in spec and not _within(op, value, spec[op]):
                problems.append(f"{path}: {value!r} violates {op} {spec[op]}")
    if isinstance(value, list) and "min_length" in spec and len(value) < spec["min_length"]:
        problems.append(f"{path}: fewer than {spec['min_length']} items")
    if isinstance(value, dict):
        model = spec.get("model")
        if model is None:
            if value and _nested_class(spec["type"]):
                problems.append(
                    f"{path}: nested config {spec['type']} is not recorded in the oracle; extend "
                    "tests/reference/llm_args before writing it"
                )
            return
        _check_model(oracle, path, oracle["models"][model], value, problems, notes)


def _unknown(oracle: Oracle, path: str, where: str, problems: list[str]) -> None:
    if path in oracle.get("removed", {}):
        problems.append(f"{path}: removed upstream: {oracle['removed'][path]}")
    elif path in oracle.get("renamed", {}):
        msg = oracle.get("renamed_messages", {}).get(path, "")
        problems.append(f"{path}: renamed upstream to {oracle['renamed'][path]} {msg}".rstrip())
    elif path in oracle.get("legacy_not_accepted", {}):
        problems.append(f"{path}: legacy key, not accepted ({oracle['legacy_not_accepted'][path]})")
    else:
        problems.append(f"{path}: not a field of {where} (unknown keys are rejected upstream)")


def _check_fields(
    oracle: Oracle, path: str, model: dict[str, Any], value: dict[str, Any], problems: list[str], notes: list[str]
) -> None:
    fields: dict[str, Field] = model["fields"]
    renamed: dict[str, str] = model.get("renamed", {})
    for key, v in value.items():
        sub = f"{path}.{key}"
        if key in fields:
            _check_field(oracle, sub, fields[key], v, problems, notes)
        elif key in renamed:
            problems.append(f"{sub}: renamed upstream to {renamed[key]}: {model.get('renamed_message', '')}".rstrip())
        else:
            _unknown(oracle, sub, model.get("class", path), problems)
    for req in model.get("requires", []):
        name, _, bound = req.partition(" > ")
        got = value.get(name)
        if got is None or (bound and not (isinstance(got, (int, float)) and got > float(bound))):
            problems.append(f"{path}: upstream requires {req}")


def _check_model(
    oracle: Oracle, path: str, model: dict[str, Any], value: dict[str, Any], problems: list[str], notes: list[str]
) -> None:
    if "variants" not in model:
        _check_fields(oracle, path, model, value, problems, notes)
        if path == "cuda_graph_config":
            _check_cuda_graph_sizes(path, value, problems)
        return
    disc = model["discriminator"]
    tag = value.get(disc)
    if tag is None:
        if model.get("discriminator_required", True):
            problems.append(f"{path}: '{disc}' is required to select a variant of {sorted(model['variants'])}")
            return
        # cuda_graph_config on 1.3: upstream infers the mode from the encoder-only keys
        keys = model.get("encoder_keys", [])
        tag = "encode" if any(value.get(k) not in (None, 0) for k in keys) else "decode"
        notes.append(f"{path}: no '{disc}'; upstream infers {disc}={tag}")
    variant = model["variants"].get(tag)
    if variant is None:
        removed = f"{path}[{disc}={tag}]"
        if removed in oracle.get("removed", {}):
            problems.append(f"{removed}: removed upstream: {oracle['removed'][removed]}")
        else:
            problems.append(f"{path}.{disc}: {tag!r} is not one of {sorted(model['variants'])}")
        return
    if variant.get("pytorch") is False:
        problems.append(f"{path}: {disc}={tag} does not support backend pytorch upstream")
    _check_fields(oracle, path, variant, value, problems, notes)
    if path == "cuda_graph_config":
        _check_cuda_graph_sizes(path, value, problems)


def _check_cuda_graph_sizes(path: str, value: dict[str, Any], problems: list[str]) -> None:
    sizes, mbs = value.get("batch_sizes"), value.get("max_batch_size")
    if sizes and isinstance(mbs, int) and mbs != 0 and mbs != max(sizes):
        problems.append(f"{path}: max_batch_size {mbs} must equal max(batch_sizes) {max(sizes)} upstream")


def check_options(opts: dict[str, Any], oracle: Oracle) -> tuple[list[str], list[str]]:
    """(problems, notes) of an options dict against one oracle; problems name the dotted path."""
    problems: list[str] = []
    notes: list[str] = []
    top: dict[str, Field] = oracle["top"]
    for key, value in opts.items():
        if key in top:
            _check_field(oracle, key, top[key], value, problems, notes)
        else:
            _unknown(oracle, key, oracle["backend_class"].split(" ")[0], problems)
    return problems, notes


# ------------------------------------------------------------------------------------------------ the oracle files


@pytest.mark.parametrize("line", sorted(LINES))
def test_oracle_files_name_their_source(line: str) -> None:
    o = load_oracle(line)
    src = o["source"]
    assert src["repo"] == "NVIDIA/TensorRT-LLM"
    assert src["path"] == "tensorrt_llm/llmapi/llm_args.py"
    assert src["revision"] and src["what"]
    assert o["strict"] is True
    for name in ("kv_cache_config", "cuda_graph_config", "scheduler_config", "speculative_config", "lora_config"):
        assert name in o["models"], name
    # every field names a type and a default; every "model" reference resolves
    for key, f in o["top"].items():
        assert {"type", "default"} <= set(f), key
        assert f.get("model", "kv_cache_config") in o["models"], key


def test_oracle_lines_differ_where_upstream_does() -> None:
    """A few facts read in the two revisions, so a careless edit of one file shows."""
    old, new = load_oracle("1.2"), load_oracle("1.3")
    assert "sampler_type" in old["top"] and "sampler_type" not in new["top"]
    assert "sampler_type" in new["removed"]
    assert "build_config" in new["removed"] and "build_config" not in new["top"]
    assert new["models"]["cuda_graph_config"]["discriminator"] == "mode"
    assert "variants" not in old["models"]["cuda_graph_config"]
    assert "nvfp4" in new["models"]["kv_cache_config"]["fields"]["dtype"]["enum"]
    assert "nvfp4" not in old["models"]["kv_cache_config"]["fields"]["dtype"]["enum"]
    for o in (old, new):
        assert o["top"]["max_batch_size"]["default"] == 2048
        assert o["top"]["max_num_tokens"]["default"] == 8192
        assert "Draft_Target" in o["models"]["speculative_config"]["variants"]
        assert "Eagle3" in o["models"]["speculative_config"]["variants"]


# ------------------------------------------------------------------------------------------------ the product


def _spec_params() -> list[Any]:
    out = []
    for p in sorted(SPECS.glob("*.yaml")):
        try:
            runtime = load_spec(p).runtime
        except Exception:  # a spec that does not load fails in its own tests; check it here anyway
            runtime = "pytorch"
        if runtime == "pytorch":
            out.append(pytest.param(p, id=p.stem))
    return out


SHIPPED_PYTORCH = _spec_params()


def _check_spec_file(path: Path) -> tuple[list[str], list[str], str]:
    spec = load_spec(path)
    version = spec.target.trtllm_version
    line = line_of(version)
    if line is None:
        pytest.fail(f"{path.name}: no oracle for TensorRT-LLM {version} (oracles: {sorted(LINES)}); record one")
    oracle = load_oracle(line)
    problems: list[str] = []
    notes: list[str] = []
    cells = expand(spec)
    assert cells, f"{path.name}: no matrix cells"
    for cell in cells:
        p, n = check_options(llmapi_options(cell), oracle)
        problems += [f"{path.name} {cell.id}: {x}" for x in p]
        notes += n
    return problems, sorted(set(notes)), line


@pytest.mark.parametrize("path", SHIPPED_PYTORCH)
def test_shipped_pytorch_spec_options_match_the_oracle(path: Path) -> None:
    problems, _notes, _line = _check_spec_file(path)
    assert not problems, "\n".join(problems)


def _pytorch_copy(src: Path, dest: Path, version: str) -> Path:
    data = yaml.safe_load(src.read_text())
    data["runtime"] = "pytorch"
    data.setdefault("target", {})["trtllm_version"] = version
    data.get("serving", {}).pop("instances", None)  # Triton C++-backend instance counts
    out = dest / src.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.parametrize("version", ["1.2.1", "1.3.0rc29"])
@pytest.mark.parametrize("name", ["tiny", "speculative-draft-target-llama-3.1-8b", "multi-lora-llama-3.1-8b"])
def test_shipped_spec_made_pytorch_matches_the_oracle(tmp_path: Path, name: str, version: str) -> None:
    """The checker runs on today's product even where no shipped spec is runtime pytorch yet: a shipped spec
    (plain, speculative, LoRA) with runtime pytorch and the target version set."""
    src = SPECS / f"{name}.yaml"
    assert src.exists(), f"{src.name} is no longer shipped: pick another spec of its kind"
    problems, _notes, line = _check_spec_file(_pytorch_copy(src, tmp_path, version))
    assert line == version[:3]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------------ the checker fails


GOOD = {
    "backend": "pytorch",
    "max_batch_size": 8,
    "max_num_tokens": 1024,
    "max_seq_len": 256,
    "kv_cache_config": {"enable_block_reuse": True, "free_gpu_memory_fraction": 0.9, "dtype": "auto"},
    "cuda_graph_config": {"enable_padding": True, "max_batch_size": 8, "batch_sizes": [1, 2, 4, 8]},
    "scheduler_config": {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"},
    "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "draft"},
}


def problems_of(opts: dict[str, Any], line: str) -> list[str]:
    return check_options(opts, load_oracle(line))[0]


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_good_options_dict_passes(line: str) -> None:
    assert problems_of(GOOD, line) == []


def test_sampler_type_is_removed_in_1_3() -> None:
    opts = GOOD | {"sampler_type": "TRTLLMSampler"}
    assert problems_of(opts, "1.2") == []
    (p,) = problems_of(opts, "1.3")
    assert p.startswith("sampler_type: removed upstream") and "TorchSampler is the only sampler" in p


def test_nvfp4_kv_cache_dtype_is_not_applied_by_1_2() -> None:
    opts = GOOD | {"kv_cache_config": {"dtype": "nvfp4"}}
    (p,) = problems_of(opts, "1.2")
    assert p.startswith("kv_cache_config.dtype: 'nvfp4' is not one of")
    assert problems_of(opts, "1.3") == []


def test_unknown_nested_key_fails_with_its_path() -> None:
    for line in LINES:
        opts = GOOD | {"kv_cache_config": {"dtype": "auto", "enable_blok_reuse": True}}
        (p,) = problems_of(opts, line)
        assert p.startswith("kv_cache_config.enable_blok_reuse: not a field of KvCacheConfig")
        (p,) = problems_of(GOOD | {"scheduler_config": {"policy": "fcfs"}}, line)
        assert p.startswith("scheduler_config.policy:")


@pytest.mark.parametrize(
    ("opts", "line", "expect"),
    [
        ({"build_config": {"max_batch_size": 8}}, "1.2", "build_config: removed upstream: TrtLlmArgs-only"),
        ({"build_config": {"max_batch_size": 8}}, "1.3", "build_config: removed upstream: TrtLlmArgs and BuildConfig"),
        ({"kv_cache_config": {"onboard_blocks": True}}, "1.3", "kv_cache_config.onboard_blocks: removed upstream"),
        (
            {"kv_cache_config": {"block_reuse_config": {"block_reuse_policy": "per_request"}}},
            "1.3",
            "kv_cache_config.block_reuse_config.block_reuse_policy: renamed upstream to policy",
        ),
        ({"kv_cache_config": {"block_reuse_config": {"policy": "x"}}}, "1.2", "kv_cache_config.block_reuse_config: "),
        ({"use_cuda_graph": True}, "1.2", "use_cuda_graph: legacy key"),
        ({"max_batch_size": "8"}, "1.3", "max_batch_size: '8' does not fit"),
        ({"max_batch_size": True}, "1.2", "max_batch_size: True does not fit"),
        ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}}, "1.2", "violates le 1"),
        ({"scheduler_config": {"capacity_scheduler_policy": "FCFS"}}, "1.3", "is not one of"),
        ({"scheduler_config": {"context_chunking_policy": "FORCE_CHUNK"}}, "1.2", "is not one of"),
        ({"cuda_graph_config": {"max_batch_size": 16, "batch_sizes": [1, 8]}}, "1.2", "must equal max(batch_sizes)"),
        ({"cuda_graph_config": {"mode": "prefill"}}, "1.3", "cuda_graph_config.mode: 'prefill' is not one of"),
        ({"cuda_graph_config": {"mode": "decode"}}, "1.2", "cuda_graph_config.mode: not a field"),
        ({"cuda_graph_config": {"num_tokens": [8], "batch_sizes": [1]}}, "1.2", "cuda_graph_config.num_tokens"),
        ({"speculative_config": {"max_draft_len": 3}}, "1.3", "'decoding_type' is required"),
        (
            {"speculative_config": {"decoding_type": "Medusa", "max_draft_len": 3}},
            "1.2",
            "does not support backend pytorch",
        ),
        (
            {"speculative_config": {"decoding_type": "Medusa", "max_draft_len": 3}},
            "1.3",
            "speculative_config[decoding_type=Medusa]: removed upstream",
        ),
        ({"speculative_config": {"decoding_type": "DraftTarget"}}, "1.3", "'DraftTarget' is not one of"),
        ({"speculative_config": {"decoding_type": "Draft_Target"}}, "1.2", "requires max_draft_len > 0"),
        ({"lora_config": {"lora_dir": ["a"], "max_lora_rank": 8, "rank": 8}}, "1.3", "lora_config.rank: not a field"),
        ({"lora_config": {"swap_gate_up_proj": True}}, "1.3", "lora_config.swap_gate_up_proj: removed upstream"),
        ({"moe_config": {"backend": "CUTLASS"}}, "1.2", "moe_config: nested config MoeConfig is not recorded"),
        ({"torch_compile_config": {"max_num_streams": 0}}, "1.3", "does not fit upstream type PositiveInt"),
    ],
)
def test_checker_rejects(opts: dict[str, Any], line: str, expect: str) -> None:
    problems = problems_of(opts, line)
    assert any(expect in p for p in problems), problems


def test_cuda_graph_config_without_mode_is_accepted_by_1_3() -> None:
    o = load_oracle("1.3")
    problems, notes = check_options({"cuda_graph_config": {"max_batch_size": 8, "enable_padding": False}}, o)
    assert problems == [] and notes == ["cuda_graph_config: no 'mode'; upstream infers mode=decode"]
    problems, notes = check_options({"cuda_graph_config": {"max_num_token": 512}}, o)
    assert problems == [] and notes == ["cuda_graph_config: no 'mode'; upstream infers mode=encode"]
    assert check_options({"cuda_graph_config": None}, o)[0] == []
