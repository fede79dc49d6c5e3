"""`build --all --dry-run` on many cells: the checkpoint is digested once and the registry is asked
once (one listing of its manifests), not once per cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain import digest as dg
from toolchain.artifacts import keys
from toolchain.registry import open_registry
from toolchain.registry.backends import LocalBackend


def many_cells(tmp_path: Path, ckpt: Path) -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["matrix"] = {
        "gpu": ["H100-SXM", "H200-SXM"],
        "max_batch_size": [8, 16, 32, 64],
        "max_seq_len": [128, 256],
        "max_input_len": [32, 64],
    }
    p = tmp_path / "many.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_dry_run_digests_once_and_lists_once(
    cli: Cli, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = many_cells(tmp_path, tiny_checkpoint)
    reg_dir = tmp_path / "reg"
    digests: list[Path] = []
    real_digest = dg.dir_digest

    def counting_digest(root: Path, **k: Any) -> str:
        digests.append(Path(root))
        return real_digest(root, **k)

    monkeypatch.setattr(keys, "dir_digest", counting_digest)
    asked: list[str] = []
    real_exists, real_list = LocalBackend.exists, LocalBackend.list

    def exists(self: LocalBackend, p: str) -> bool:
        asked.append(f"exists {p}")
        return real_exists(self, p)

    def listing(self: LocalBackend, p: str) -> Any:
        asked.append(f"list {p}")
        return real_list(self, p)

    monkeypatch.setattr(LocalBackend, "exists", exists)
    monkeypatch.setattr(LocalBackend, "list", listing)

    r = cli("build", spec, "--all", "--dry-run", "--registry", reg_dir, "--json")
    assert r.exit_code == 0, r.output
    cells = json.loads(r.stdout)["cells"]
    assert len(cells) == 32 and {c["status"] for c in cells} == {"planned"}
    assert digests == [tiny_checkpoint]
    assert asked == ["list manifests/"]

    key = cells[5]["engine_key"]
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    open_registry(str(reg_dir)).put(key, tmp_path / "eng")
    asked.clear()
    digests.clear()
    r = cli("build", spec, "--all", "--dry-run", "--registry", reg_dir, "--json")
    again = json.loads(r.stdout)["cells"]
    assert [c["engine_key"] for c in again if c["status"] == "cached"] == [key]
    assert asked == ["list manifests/"] and digests == [tiny_checkpoint]
