"""The stand-ins are independent oracles: their parsers come from upstream argparse definitions kept as
reference data (tests/reference/*argparse.json), so a flag the product gets wrong fails a test."""

from __future__ import annotations

import importlib.machinery
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPECS
from toolchain.compile import flags as F
from toolchain.compile.synth import convert_checkpoint_args, trtllm_build_args
from toolchain.specs.loader import load_spec
from toolchain.specs.matrix import Cell, expand

TESTS = Path(__file__).resolve().parents[1]
BUILD = TESTS / "fakes" / "bin" / "trtllm-build"
CONVERT = TESTS / "fakes" / "trtllm_root" / "examples" / "models" / "core" / "llama" / "convert_checkpoint.py"
REF = json.loads((TESTS / "reference" / "trtllm_build_argparse.json").read_text())
CONV_REF = json.loads((TESTS / "reference" / "llama_convert_checkpoint_argparse.json").read_text())
SPEC_FILES = sorted(p for p in SPECS.glob("*.yaml"))


def _standin() -> types.ModuleType:
    loader = importlib.machinery.SourceFileLoader("trtllm_build_standin", str(BUILD))
    mod = types.ModuleType(loader.name)
    mod.__file__ = str(BUILD)
    loader.exec_module(mod)
    return mod


def _cells() -> list[Cell]:
    out = []
    for p in SPEC_FILES:
        spec = load_spec(p)
        if spec.runtime == "tensorrt":
            out += expand(spec)
    return out


def test_standins_do_not_import_the_product() -> None:
    import ast

    for f in (BUILD, CONVERT):
        tree = ast.parse(f.read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m.split(".")[0] == "toolchain" for m in mods), (f, mods)
        assert "sys.path" not in f.read_text(), f


def test_product_flag_table_agrees_with_upstream_argparse() -> None:
    ref = REF["flags"]
    for name, flag in F.FLAGS.items():
        assert name in ref, f"{name} is not a trtllm-build flag upstream"
        up = ref[name]
        assert up.get("action") != "store_true", name
        want_type = {"str": str, "int": int}.get(up["type"], str)
        assert flag.type is want_type, name
        if flag.choices is not None:
            assert sorted(flag.choices) == sorted(up["choices"]), name
    for name in F.STORE_TRUE:
        assert ref[name]["action"] == "store_true", name
    for name in F.REMOVED:
        assert name not in ref, f"{name} is listed as removed but upstream still has it"
    for name in F.DEPRECATED:
        assert name in ref, f"{name} is listed as deprecated but upstream has no such flag"


@pytest.mark.parametrize("cell", _cells(), ids=lambda c: f"{c.spec.name}:{c.id}")
def test_every_synthesised_command_parses_with_upstream_argparse(cell: Cell, tmp_path: Path) -> None:
    args = trtllm_build_args(cell, tmp_path / "ckpt", tmp_path / "engine", timing_cache_out=tmp_path / "t")
    ns = _standin().parser_from_reference().parse_args(args[1:])
    assert ns.max_batch_size == cell.max_batch_size and ns.max_seq_len == cell.max_seq_len


def _run_standin(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH: the stand-in must work without the product importable
    env = {"PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda a: [*a, "--paged_context_fmha", "enable"], "unrecognized arguments"),  # a misspelt flag
        (lambda a: [*a, "--tokens_per_block", "32.5"], "invalid int value"),
        (lambda a: [*a, "--tp_size", "2"], "unrecognized arguments"),  # removed from trtllm-build
        (lambda a: [*a, "--gemm_plugin", "int8"], "invalid choice"),
        (lambda a: [*a, "--use_paged_context_fmha"], "expected one argument"),  # bool plugin flags take a value
    ],
)
def test_a_wrong_product_flag_now_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, edit: Any, message: str
) -> None:
    """The product's own check would pass these once its table is wrong the same way; the stand-in does not."""
    cell = _cells()[0]
    args = edit(trtllm_build_args(cell, tmp_path / "ckpt", tmp_path / "engine")[1:])
    for a in args:
        if a.startswith("--") and a not in F.FLAGS and a not in F.STORE_TRUE:
            monkeypatch.setitem(F.FLAGS, a, F.Flag(str))  # the product table "learns" the wrong flag
    monkeypatch.setattr(F, "REMOVED", ())
    monkeypatch.setitem(F.FLAGS, "--gemm_plugin", F.Flag(str))
    r = _run_standin(args, tmp_path)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_convert_checkpoint_standin_follows_upstream(tmp_path: Path, tiny_checkpoint: Path) -> None:
    cell = _cells()[0]
    args = convert_checkpoint_args(cell, "LlamaForCausalLM", tiny_checkpoint, tmp_path / "ck", TESTS / "fakes")
    assert set(a for a in args if a.startswith("--")) <= set(CONV_REF["flags"])
    args[1] = str(CONVERT)
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["mapping"]["world_size"] == cell.tp * cell.pp
    bad = [*args, "--use_fp8_kv_cache"]
    r = subprocess.run(bad, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
