"""The artifacts layer: one identity per artifact, every cache path from one layout, the source digest once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import toolchain.artifacts
from tests.conftest import SPECS
from toolchain import digest
from toolchain.artifacts import keys
from toolchain.artifacts.cell import for_cell, for_cells
from toolchain.artifacts.layout import CacheLayout, cache
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import expand

ROOT = Path("/R")
KEY = "a" * 64


def _layout_paths() -> dict[str, Path]:
    lay = CacheLayout(ROOT)
    return {
        "registry": lay.registry,
        "quantized": lay.quantized("tiny", "fp8", 1, 1, KEY),
        "engine": lay.engine(KEY),
        "logs": lay.logs,
        "build_log": lay.build_log("h100-sxm-b8", KEY),
        "server_log": lay.server_log(),
        "build_work": lay.build_work,
        "up_work": lay.up_work("tiny", "h100-sxm-b8"),
        "dynamo_run": lay.dynamo_run("tiny"),
        "triton_backends": lay.triton_backends(),
        "statcache": lay.statcache,
        "statcache_blake3": lay.statcache_blake3,
        "verified_blobs": lay.verified_blobs,
        "staging_entry": lay.staging_entry(Path("/data/.engine.partial.abcd1234")),
    }


def _documented_patterns() -> list[str]:
    """Top-level entries of the layout map in the package docstring, as regular expressions."""
    doc = toolchain.artifacts.__doc__ or ""
    block = doc.split("::", 1)[1]
    patterns = []
    for line in block.splitlines():
        if not line.startswith("    ") or line.startswith("        ") or not line.strip():
            continue
        entry = line.split()[0]
        rx = re.escape(entry).replace(r"\*", "[^/]*")
        rx = re.sub(r"<[^>]*>", "[^/]+", rx.replace(r"\<", "<").replace(r"\>", ">"))
        patterns.append(rx.rstrip("/") + "/?")
    return patterns


def test_every_cache_path_is_in_the_documented_map() -> None:
    patterns = _documented_patterns()
    assert len(patterns) >= 10
    for name, path in _layout_paths().items():
        rel = path.relative_to(ROOT).as_posix()
        assert any(re.fullmatch(p, rel) for p in patterns), f"{name}: {rel} is not in the artifacts docstring map"
    for p in patterns:  # and nothing documented that the layout does not produce
        assert any(re.fullmatch(p, path.relative_to(ROOT).as_posix()) for path in _layout_paths().values()), p


def test_cache_root_follows_the_environment_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "one"))
    assert cache().registry == tmp_path / "one" / "registry"
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "two"))
    assert cache().registry == tmp_path / "two" / "registry"


def _local_spec(tmp_path: Path) -> Path:
    """A spec with several cells whose source is a local directory (content is all a digest needs)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"weights")
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["matrix"]["max_batch_size"] = [8, 16]
    d["matrix"]["max_seq_len"] = [128, 256]
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_source_digest_is_computed_once_for_all_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    real = digest.dir_digest

    def counting(path: Path, **kw: Any) -> str:
        calls.append(path)
        return real(path, **kw)

    monkeypatch.setattr(keys, "dir_digest", counting)
    spec = load_spec(_local_spec(tmp_path))
    arts = for_cells(spec)
    assert len(arts) == 4
    ids = [(a.engine_key, a.profile_id, a.quantized_dir, a.quantized_key) for a in arts]
    assert all(i[0] for i in ids)
    assert len(calls) == 1


def test_a_quantized_checkpoint_has_one_identity(tmp_path: Path) -> None:
    """Its registry key, its cache directory and its CI quantize job all derive from one key."""
    from toolchain.pipeline.matrix import build_matrix

    spec_path = _local_spec(tmp_path)
    art = for_cells(load_spec(spec_path))[0]
    qkey = art.quantized_key
    assert re.fullmatch(r"[0-9a-f]{64}", qkey)
    assert art.quantized_dir.name.endswith(qkey[:12])
    assert keys.quantize_job_id(qkey) == f"q-{qkey[:12]}"
    m = build_matrix([spec_path])
    assert [q["id"] for q in m["quantize"]] == [f"q-{qkey[:12]}"]
    assert {b["needs"] for b in m["build"]} == {f"q-{qkey[:12]}"}


def test_quantized_identity_follows_source_and_recipe_not_shape(tmp_path: Path) -> None:
    spec = load_spec(_local_spec(tmp_path))
    arts = for_cells(spec)
    assert len({a.quantized_key for a in arts}) == 1  # batch/seq do not change the quantized checkpoint
    other = for_cell(expand(spec)[0], {"digest": "sha256:" + "1" * 64})
    assert other.quantized_key != arts[0].quantized_key
    assert other.engine_key != arts[0].engine_key


def test_pending_source_has_no_engine_key_but_a_job_id(tmp_path: Path) -> None:
    spec_path = _local_spec(tmp_path)
    spec = load_spec(spec_path)
    (tmp_path / "ckpt" / "config.json").unlink()
    art = for_cells(spec)[0]
    assert art.engine_key is None and art.profile_id is None
    assert art.pending and "checkpoint not found" in art.pending
    assert art.quantized_key == keys.quantized_key(keys.pending_source(spec), art.recipe)
