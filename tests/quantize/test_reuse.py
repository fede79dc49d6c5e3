"""Reusing a quantized checkpoint trusts a verified stat signature (with ctime) instead of re-hashing
every file each time; a rewrite that keeps size and mtime is still caught; ``rehash`` reads all."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli, write_tiny_spec
from toolchain import digest as dg
from toolchain.artifacts import quantized
from toolchain.artifacts.recipe import Recipe
from toolchain.quantize import run as qrun

pytestmark = pytest.mark.slow
FAST: dict[str, Any] = {"samples": 8, "seq_len": 32, "batch_size": 4}


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = dg.hash_file

    def spy(path: Path, *a: Any, **k: Any) -> str:
        reads.append(Path(path))
        return real(path, *a, **k)

    monkeypatch.setattr(dg, "hash_file", spy)
    monkeypatch.setattr(quantized, "hash_file", spy)
    return reads


def test_reuse_reads_nothing_until_a_file_changes(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "q"
    recipe = Recipe("fp8", **FAST)
    made = qrun.quantize(tiny_checkpoint, recipe, out)
    reads = count_reads(monkeypatch)
    again = qrun.quantize(tiny_checkpoint, recipe, out, reuse=True)
    assert again.reused and again.manifest == made.manifest
    assert quantized.verify_output(out) == made.manifest
    assert reads == []  # neither the input checkpoint nor the outputs were read again
    assert qrun.quantize(tiny_checkpoint, recipe, out, reuse=True, rehash=True).reused
    assert {out / rel for rel in made.manifest["files"]} <= set(reads)  # on request: every file read
    reads.clear()

    st_file = out / "hf" / "model.safetensors"
    st = st_file.stat()
    with open(st_file, "r+b") as f:  # flip one byte of the data: same size, same inode
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(st_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert quantized.verify_output(out) is None  # ctime moved: re-read, and the digest no longer matches
    assert st_file in reads

    with open(st_file, "r+b") as f:  # put it back; a full re-hash on request reads every file
        f.seek(st.st_size - 1)
        f.write(last)
    reads.clear()
    assert quantized.verify_output(out, rehash=True) == made.manifest
    assert sorted(reads) == sorted(out / rel for rel in made.manifest["files"])


def test_quantize_cli_rehash_reads_every_file_again(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_tiny_spec(tmp_path / "tiny.yaml", tiny_checkpoint, calibration={"samples": 8, "seq_len": 32})
    assert cli("quantize", spec).exit_code == 0
    reads = count_reads(monkeypatch)
    r = cli("quantize", spec)
    assert r.exit_code == 0 and "reused" in r.output and reads == [], r.output
    r = cli("quantize", spec, "--rehash")
    assert r.exit_code == 0 and "reused" in r.output, r.output
    out = Path(r.output.split("reused ", 1)[1].split(" (", 1)[0])
    assert {p.name for p in reads} >= {p.name for p in out.rglob("*.safetensors")} != set()
