"""A core-only install (no extras): every command that needs an extra exits 3 with the install hint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SPECS
from tests.helpers import copied_tiny_spec

# Every module an extra installs is made unimportable, as in `pip install toolchain` without extras.
BLOCKER = """
import sys
BLOCKED = {blocked!r}

class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Missing())
sys.argv = ["toolchain", *{argv!r}]
from toolchain.cli.main import run
run()
"""
EXTRA_MODULES = sorted(
    {"torch", "transformers", "modelopt", "safetensors", "accelerate", "tokenizers", "tritonclient", "pytriton"}
    | {"google", "grpc", "numpy", "boto3", "botocore", "huggingface_hub", "pynvml", "matplotlib", "jinja2"}
)  # httpx is a core dependency (toolchain/http.py)


def _core_only(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = BLOCKER.format(blocked=EXTRA_MODULES, argv=argv)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "TOOLCHAIN_CACHE": str(tmp_path / "c")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )


def _result(tmp_path: Path) -> Path:
    p = tmp_path / "r.json"
    from toolchain.bench.metrics import RequestRecord, aggregate

    rec = RequestRecord(0, 4, 2, 0.0, chunk_times=[0.1, 0.2], output_tokens=2)
    run = {"label": "concurrency=1", "load": {"concurrency": 1}, "summary": aggregate([rec], 1.0), "client": {}}
    p.write_text(json.dumps({"kind": "toolchain.bench-result", "provenance": {}, "runs": [run | {"records": []}]}))
    return p


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["triton", "lint", "{repo}"], "triton"),
        (["serve", "{repo}"], "triton"),
        (["bench", "--url", "127.0.0.1:1", "--tokenizer", "{tmp}"], "triton"),
        (["bench", "report", "{result}", "--out", "{tmp}/rep"], "report"),
        (["up", "{tiny}"], "quantize,triton,report"),
        (["quantize", "--checkpoint", "{ckpt}", "--weights", "fp8", "--out", "{tmp}/q"], "quantize"),
    ],
    ids=["triton-lint", "serve", "bench", "bench-report", "up", "quantize"],
)
def test_command_needing_an_extra_exits_3_with_the_hint(
    argv: list[str], extra: str, tmp_path: Path, tiny_checkpoint: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / "ensemble").mkdir(parents=True)
    (repo / "ensemble" / "config.pbtxt").write_text('name: "ensemble"\nplatform: "ensemble"\n')
    tiny = copied_tiny_spec(tmp_path)  # not the checkout's spec, whose checkpoint `up` may have made
    args = [a.format(tmp=tmp_path, result=_result(tmp_path), repo=repo, ckpt=tiny_checkpoint, tiny=tiny) for a in argv]
    r = _core_only(args, tmp_path)
    assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: this command needs the Python package") and f"toolchain[{extra}]" in last, last


def test_core_commands_still_work_without_extras(tmp_path: Path) -> None:
    r = _core_only(["spec", "validate", str(SPECS / "tiny.yaml")], tmp_path)
    assert r.returncode == 0, r.stderr
    r = _core_only(["--version"], tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("toolchain ")
