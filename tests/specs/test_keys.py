"""Engine keys and profile ids follow the build/runtime field table, field by field."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import ValidationError

from tests.conftest import SPECS
from toolchain.artifacts.keys import engine_key, profile_id, source_identity
from toolchain.specs.fields import field_table
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand
from toolchain.specs.models import EngineSpec
from toolchain.specs.speculative_spec import draft_cell

CKPT = {"digest": "sha256:" + "0" * 64}
# the 8B spec on the engine path: runtime fields then change the profile, never the engine key (on the
# PyTorch runtime they are part of the artifact's options file, test_pytorch_artifact_key_follows_what_it_carries)
_SHIPPED = load_spec(SPECS / "llama-3.1-8b-fp8.yaml")
BASE = EngineSpec.model_validate(_SHIPPED.model_dump(mode="json") | {"runtime": "tensorrt"})


def _set(d: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        if d.get(p) is None:
            d[p] = {}
        d = d[p]
    d[parts[-1]] = value


def _get(d: dict[str, Any], path: str) -> Any:
    node: Any = d
    for p in path.split("."):
        if node is None:
            return None
        node = node.get(p)
    return node


def _candidates(path: str, current: Any) -> list[Any]:
    if isinstance(current, bool):
        return [not current]
    if isinstance(current, int):
        return [current * 2, current + 1, max(1, current // 2), 64, 32]
    if isinstance(current, float):
        return [current / 2, min(1.0, current + 0.05), 0.5]
    if isinstance(current, list):
        return [current[:1], [*current, current[-1] * 2 if isinstance(current[-1], int) else "L4"]]
    if isinstance(current, str):
        return [
            "hf://org/other@v2",
            "float16",
            "fp16",
            "auto",
            "disable",
            "int8_sq",
            "pytorch",
            "tensorrt",
            "1.2.0",
            "10.13.2",
            "guaranteed_no_evict",
            "max_utilization",
            "continuous",
            "V1",
            "float32",
            "medusa",
            "fp8",
            "aggregated",
            "round-robin",
            "nixl",
            "nvlink4",
            current + "x",
            2,  # int | Literal["plan"] fields (dynamo pool replicas)
        ]
    # None: try values of every common kind
    return [True, False, 7, 128, 0.5, "auto", "disable", [1, 2], [[0]], "fp8", "10.14.1"]


# Optional blocks absent from BASE are mutated from a base that sets them (each mode's own fields).
_DRAFT = {"mode": "draft_target", "max_draft_len": 5, "draft": {"source": "hf://org/draft@v1"}}
_BLOCK_BASES: dict[str, dict[str, Any]] = {
    "speculative.mode": {"speculative": {"mode": "eagle", "heads": {"source": "hf://org/eagle@v1"}}},
    "speculative.max_draft_len": {"speculative": _DRAFT},
    "speculative.draft.": {"speculative": _DRAFT},
    "speculative.heads.": {"speculative": {"mode": "medusa", "heads": {"source": "hf://org/medusa@v1"}}},
    "speculative.lookahead.": {"speculative": {"mode": "lookahead", "lookahead": {}}},
    "lora.": {"lora": {"adapters": ["adapters/a"]}},
    "dynamo.workers.": {"dynamo": {"mode": "aggregated"}},
    "dynamo.": {"dynamo": {}},
}


def _base(path: str) -> EngineSpec:
    for prefix, block in _BLOCK_BASES.items():
        if path.startswith(prefix):
            return EngineSpec.model_validate(BASE.model_dump(mode="json") | block)
    return BASE


def _mutations() -> list[tuple[str, str]]:
    return [(p, s) for p, s in field_table().items() if not p.startswith(("traffic.", "matrix."))]


def _mutate(path: str) -> EngineSpec:
    base = _base(path)
    data = base.model_dump(mode="json")
    current = _get(data, path)
    for value in _candidates(path, current):
        if value == current:
            continue
        d = base.model_dump(mode="json")
        _set(d, path, value)
        try:
            return EngineSpec.model_validate(d)
        except ValidationError:
            continue
    raise AssertionError(f"no valid mutation found for {path}")


def _ids(spec: EngineSpec, *, draft: bool = False) -> tuple[str, str]:
    """Engine key and profile id of the first cell (of its draft engine with ``draft``)."""
    cell = expand(spec)[0]
    if draft:
        cell = draft_cell(cell)
    ckpt = source_identity(cell.spec)
    assert ckpt is not None
    key = engine_key(cell, ckpt)
    return key, profile_id(cell, key)


def test_every_field_declares_a_scope() -> None:
    table = field_table()
    assert len(table) > 50
    assert set(table.values()) == {"build", "runtime", "plan"}
    assert table["build.max_num_tokens"] == "build"
    assert table["serving.enable_prefix_caching"] == "runtime"


@pytest.mark.parametrize(("path", "scope"), _mutations())
def test_field_changes_key_or_profile_as_declared(path: str, scope: str) -> None:
    draft = path.startswith("speculative.draft.")  # these build the draft engine, keyed on its own
    base_key, base_profile = _ids(_base(path), draft=draft)
    key, profile = _ids(_mutate(path), draft=draft)
    if scope == "build":
        assert key != base_key, f"{path} is a build field but the engine key did not change"
    elif scope == "runtime":
        assert key == base_key, f"{path} is a runtime field but the engine key changed"
        assert profile != base_profile, f"{path} is a runtime field but the profile id did not change"
    else:
        assert (key, profile) == (base_key, base_profile), f"{path} is a plan field but an id changed"


def test_keys_are_stable_and_order_independent() -> None:
    a = _ids(BASE)
    data = BASE.model_dump(mode="json")
    reordered = dict(reversed(list(data.items())))
    b = _ids(EngineSpec.model_validate(reordered))
    assert a == b
    # A fixed input gives a fixed key: this value must not drift across runs, Pythons or releases
    # without a deliberate KEY_SCHEMA bump.
    assert len(a[0]) == 64 and a[0] == _ids(EngineSpec.model_validate(data))[0]
    shipped = _SHIPPED.model_dump(mode="json")
    assert _ids(_SHIPPED) == _ids(EngineSpec.model_validate(dict(reversed(list(shipped.items())))))


def test_checkpoint_and_cell_axes_change_the_key() -> None:
    cells = expand(BASE)
    keys = {engine_key(c, CKPT) for c in cells}
    assert len(keys) == len(cells)
    other = {"digest": "sha256:" + "1" * 64}
    assert engine_key(cells[0], other) != engine_key(cells[0], CKPT)


def test_field_table_covers_every_model_field() -> None:
    # every leaf of the JSON schema appears in the table
    from toolchain.specs.loader import _unwrap

    def leaves(model: Any, prefix: str = "") -> set[str]:
        out = set()
        for name, f in model.model_fields.items():
            inner = _unwrap(f.annotation)
            if isinstance(inner, type) and hasattr(inner, "model_fields"):
                out |= leaves(inner, f"{prefix}{name}.")
            else:
                out.add(f"{prefix}{name}")
        return out

    assert leaves(EngineSpec) == set(field_table())
    assert typing.get_origin(EngineSpec.model_fields["runtime"].annotation) is typing.Literal


GOLDEN_SPEC = """
name: golden
model: {source: "hf://org/model@0123456789abcdef0123456789abcdef01234567"}
quantization: {weights: fp8, kv_cache: fp8}
target: {trtllm_version: "1.1.0", tensorrt_version: "10.13.3"}
matrix: {gpu: [H100-SXM], max_batch_size: [64], max_seq_len: [4096]}
"""


def test_golden_key_is_the_same_on_every_run_and_python() -> None:
    """A registry shared by a fleet only works if the key never drifts for the same inputs. If this value
    changes on purpose (a new build field, a new default), bump KEY_SCHEMA and update it here."""
    from toolchain.specs.loader import parse_spec_text

    cell = expand(parse_spec_text(GOLDEN_SPEC))[0]
    key = engine_key(cell, source_identity(cell.spec))  # type: ignore[arg-type]
    assert key == "42b3bdd95c34a0e604e1f7ff1fa9f9655a8fe732ffb0282b8ba03b16a440c43d"
    assert profile_id(cell, key) == "4dddbc8cd57712bb0201d31a42c2fd51e56048159ce6a9de56cbd81969e12e76"


def test_pytorch_artifact_key_follows_what_it_carries(tmp_path: Any) -> None:
    """A PyTorch-runtime artifact holds its checkpoint, its LLM-API options file and the draft/adapters it
    carries; it used to be keyed on the checkpoint and build fields only, so editing a local adapter, naming
    another one or changing a serving option reused the old artifact (stale adapters and options)."""
    adapter = tmp_path / "sql"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "adapter_model.safetensors").write_bytes(b"v1")

    def key(**over: Any) -> str:
        d = BASE.model_dump(mode="json")
        d["runtime"] = "pytorch"
        d["target"] = {**d["target"], "trtllm_version": "1.2.1", "container": None}
        d["lora"] = {"adapters": [str(adapter)], "max_rank": 8}
        for path, value in over.items():
            _set(d, path, value)
        return _ids(EngineSpec.model_validate(d))[0]

    first = key()
    assert key() == first  # stable
    (adapter / "adapter_model.safetensors").write_bytes(b"v2")
    edited = key()
    assert edited != first
    assert key(**{"lora.adapters": [str(adapter), "hf://org/other@v1"]}) != edited
    assert key(**{"serving.kv_cache_free_gpu_mem_fraction": 0.5}) != edited
    tensorrt = BASE.model_dump(mode="json")
    tensorrt["serving"]["kv_cache_free_gpu_mem_fraction"] = 0.5
    assert _ids(EngineSpec.model_validate(tensorrt))[0] == _ids(BASE)[0]  # an engine does not hold options
