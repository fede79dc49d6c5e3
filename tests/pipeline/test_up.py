"""`toolchain up` on the tiny spec: real ModelOpt, real Triton, a streaming benchmark; resumable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SPECS, Cli
from toolchain.specs.loader import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.server]


def _spec(tmp_path: Path) -> Path:
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(tmp_path / "tiny-llama")  # created by `up`, like on a fresh clone
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_interrupted_up_resumes_then_finishes_with_a_benchmark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    from toolchain.pipeline import up
    from toolchain.triton import server as S

    spec = _spec(tmp_path)
    real_start = S.start

    def interrupted(*a: Any, **k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        up.run_up(load_spec(spec), requests=2)
    assert (tmp_path / "tiny-llama" / "config.json").is_file()
    monkeypatch.setattr(S, "start", real_start)

    r = cli("up", spec, "--requests", "3", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["stages"]["checkpoint"] == "present" and res["stages"]["quantize"] == "reused"
    # the PyTorch runtime (the default): a cold bundle is published, the CPU stand-in for the LLM API serves it
    assert "stand-in for TensorRT-LLM's LLM API" in res["served_by"] and "not TensorRT-LLM" in res["served_by"]
    assert res["stages"]["build"].startswith(("published", "cached")) and "cold bundle" in res["stages"]["build"]
    assert res["bench"]["provenance"]["reference"] == res["served_by"]
    # start-up: launch to ready and the first request, with what the runtime started with, as the stand-in's
    startup = res["bench"]["startup"]
    assert startup["ready_s"] > 0 and startup["first_request_ms"] > 0 and startup["bundle"] == "cold"
    assert startup["start"].startswith("cold start") and "stand-in" in startup["measured_on"]
    assert "the CPU stand-in's figures" in res["stages"]["startup"]
    runs = res["bench"]["runs"]
    assert [run["summary"]["completed"] for run in runs] == [3, 3]
    assert all(run["summary"]["errors"] == 0 and run["summary"]["ttft_ms"]["p50"] > 0 for run in runs)
    assert res["bench"]["provenance"]["engine_key"] == res["engine_key"]
    assert Path(res["artifacts"]["report"]).is_file()
    floor = res["tpot_floor_ms"]
    # the tiny model's floor is microseconds: said in µs, as bench's planner line says it (main: "0.004 ms")
    assert (
        "KV of 8 × 256 tokens" in res["stages"]["plan"] and "on H100-SXM" in res["stages"]["plan"]
    )  # the cell's scale
    assert floor < 0.1 and f"TPOT floor {floor * 1000:.1f} µs" in res["stages"]["plan"], res["stages"]


def test_up_replaces_a_repository_an_older_toolchain_left_in_its_work_directory(tmp_path: Path) -> None:
    """Measured on a fresh clone with an existing ~/.cache/toolchain: `toolchain up engine_specs/tiny.yaml` exited
    with "the toolchain did not write .../up/tiny-.../repo/README.md (and 19 more)": the repository up itself had
    written before output directories carried their marker."""
    from toolchain.outdir import MARKER
    from toolchain.pipeline.up import fresh_repo

    old = tmp_path / "repo"
    (old / "tensorrt_llm").mkdir(parents=True)
    (old / "README.md").write_text("written by an older toolchain")
    assert fresh_repo(tmp_path) == old and not old.exists()
    old.mkdir()
    (old / MARKER).write_text("{}")
    (old / "README.md").write_text("ours, marked")
    assert fresh_repo(tmp_path) == old and (old / "README.md").exists()  # the guarded writer decides about it
