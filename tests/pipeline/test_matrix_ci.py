"""`toolchain matrix` output and the CI definitions that consume it, validated structurally."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from toolchain.registry import open_registry

ALL = sorted(SPECS.glob("*.yaml"))


def _builds(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for i in range(4) for b in m[f"build_{i}"]["include"]]


def test_github_matrix_gives_no_job_to_cached_cells(cli: Cli, tmp_path: Path) -> None:
    r = cli("matrix", *ALL, "--format", "github", "--registry", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    builds = _builds(m)
    # 14 cells of the Triton specs (tiny-engine's included), the LoRA and the draft-target examples, and 1 of
    # the Dynamo spec (an LLM-API job)
    assert len(builds) == 17 and m["build_0_count"] == 17 and m["cached"] == []
    for b in builds:
        assert set(b) >= {"id", "spec", "cell", "gpu", "runner", "container", "needs"}
        assert None not in b.values(), b  # absent keys are left out, never null
        assert b["needs"] in {q["id"] for q in m["quantize"]["include"]}
    h100 = next(b for b in builds if b["gpu"] == "H100-SXM" and b.get("engine_key"))
    assert h100["runner"] == "gpu-h100"
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    open_registry(str(tmp_path / "reg")).put(h100["engine_key"], tmp_path / "eng")
    m2 = json.loads(cli("matrix", *ALL, "--format", "github", "--registry", tmp_path / "reg").stdout)
    assert m2["cached"] == [h100["id"]]
    assert h100["id"] not in {b["id"] for b in _builds(m2)} and m2["build_0_count"] == 16
    # one quantize job per model x precision x mapping: the 8B spec's 8 cells share one
    q8 = [q for q in m["quantize"]["include"] if q["spec"].endswith("llama-3.1-8b-fp8.yaml")]
    assert len(q8) == 1


def _synthetic(n: int, cached: int = 0) -> dict[str, Any]:
    q = [{"id": "q-0", "spec": "s.yaml", "runner": "gpu-h100"}]
    b = [
        {
            "id": f"b-{i:04d}",
            "spec": "s.yaml",
            "cell": f"c{i}",
            "runner": "gpu-h100",
            "cached": i < cached,
            "needs": "q-0",
        }
        for i in range(n)
    ]
    return {"quantize": q, "build": b}


def test_github_matrices_respect_256_jobs_and_1_mb() -> None:
    from toolchain.errors import UserInputError
    from toolchain.pipeline.matrix import GITHUB_MAX_OUTPUT_BYTES, github

    out = github(_synthetic(700, cached=100))
    counts = [out[f"build_{i}_count"] for i in range(4)]
    assert counts == [256, 256, 88, 0] and len(out["cached"]) == 100
    assert all(len(out[f"build_{i}"]["include"]) <= 256 for i in range(4))
    assert len(json.dumps(out, separators=(",", ":"))) <= GITHUB_MAX_OUTPUT_BYTES
    with pytest.raises(UserInputError, match="4 build stages"):
        github(_synthetic(4 * 256 + 1))
    big = _synthetic(900)
    for b in big["build"]:
        b["spec"] = "x" * 1500  # long paths: the outputs would pass 1 MB
    with pytest.raises(UserInputError, match="1,000,000 bytes"):
        github(big)
    everything_cached = github(_synthetic(5, cached=5))
    assert everything_cached["quantize_count"] == 0 and everything_cached["build_0_count"] == 0


def test_empty_registry_is_refused(cli: Cli) -> None:
    r = cli("matrix", *ALL, "--format", "github", "--registry", "")
    assert r.exit_code == 2 and "TOOLCHAIN_REGISTRY" in r.output


def test_gitlab_child_pipeline_structure(cli: Cli, tmp_path: Path) -> None:
    r = cli("matrix", *ALL, "--format", "gitlab", "--offline")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    stages = doc["stages"]
    jobs = {k: v for k, v in doc.items() if k not in ("stages", "default", "variables")}
    for name, job in jobs.items():
        assert job["stage"] in stages and job["tags"] and job["script"]
        assert job["script"][0].startswith("scripts/ci-gpu-job.sh "), name
        assert job["artifacts"]["paths"] == [".toolchain-cache/logs/"]
        for need in job.get("needs", []):
            assert need in jobs, f"{name} needs unknown job {need}"
    assert doc["variables"]["TOOLCHAIN_CACHE"] == "$CI_PROJECT_DIR/.toolchain-cache"
    assert "before_script" not in doc["default"]  # no scripts/setup.sh venv hiding the container's TensorRT-LLM
    assert sum(j["stage"] == "build" for j in jobs.values()) == 17  # 16 Triton cells + 1 Dynamo spec cell
    from toolchain.pipeline.matrix import gitlab

    done = gitlab(_synthetic(3, cached=3))
    assert [k for k in done if k not in ("stages", "default", "variables")] == ["nothing-to-build"]
    assert "tags" not in done["nothing-to-build"]  # no GPU runner


def test_runner_map_is_configurable_and_checked(cli: Cli, tmp_path: Path) -> None:
    mp = tmp_path / "runners.yaml"
    mp.write_text("H100-SXM: big-h100\n")
    m = json.loads(cli("matrix", SPECS / "llama-3.1-8b-fp8.yaml", "--runner-map", mp, "--offline").stdout)
    assert {b["runner"] for b in m["build"] if b["gpu"] == "H100-SXM"} == {"big-h100"}
    mp.write_text("- not a mapping\n")
    r = cli("matrix", SPECS / "llama-3.1-8b-fp8.yaml", "--runner-map", mp, "--offline")
    assert r.exit_code == 2


def _github_jobs(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert True in doc or "on" in doc  # YAML 1.1 reads `on:` as a boolean key
    return dict(doc["jobs"])


def test_github_workflow_structure() -> None:
    from toolchain.pipeline.matrix import GITHUB_BUILD_STAGES, github

    jobs = _github_jobs(REPO / "ci" / "github" / "engine-matrix.yml")
    stages = [f"build-{i}" for i in range(GITHUB_BUILD_STAGES)]
    assert set(jobs) == {"cpu-tiny", "plan", "quantize", *stages}
    outputs = jobs["plan"]["outputs"]
    assert set(outputs) == {k for k in github(_synthetic(1)) if k != "cached"}
    for name, job in jobs.items():
        assert "runs-on" in job or "uses" in job, name
        for step in job.get("steps", []):
            assert ("run" in step) != ("uses" in step), f"{name}: a step needs exactly one of run/uses"
        needs = job.get("needs", [])
        for n in [needs] if isinstance(needs, str) else needs:
            assert n in jobs
        matrix = job.get("strategy", {}).get("matrix")
        if matrix is not None:
            m = re.fullmatch(r"\$\{\{ fromJSON\(needs\.plan\.outputs\.(\w+)\) \}\}", matrix)
            assert m and m.group(1) in outputs, matrix
    for i, name in enumerate(stages):
        job = jobs[name]
        assert job["uses"] == "./.github/workflows/build-cells.yml"
        assert job["with"]["matrix"] == f"${{{{ needs.plan.outputs.build_{i} }}}}"
        assert f"needs.plan.outputs.build_{i}_count != '0'" in job["if"]
    assert "needs.plan.outputs.quantize_count != '0'" in jobs["quantize"]["if"]
    assert "toolchain up engine_specs/tiny.yaml" in jobs["cpu-tiny"]["steps"][-1]["run"]
    gpu_jobs = [jobs["quantize"], _github_jobs(REPO / "ci" / "github" / "build-cells.yml")["build"]]
    for job in gpu_jobs:
        runs = [s["run"] for s in job["steps"] if "run" in s]
        assert all("setup.sh" not in r for r in runs)
        assert any(r.startswith("scripts/ci-gpu-job.sh ") for r in runs)
        uploads = [s for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
        assert uploads and uploads[0]["with"]["path"] == ".toolchain-cache/logs/"
    call = yaml.safe_load((REPO / "ci" / "github" / "build-cells.yml").read_text())
    assert call[True]["workflow_call"]["inputs"]["matrix"]["type"] == "string"


def test_gitlab_parent_pipeline_structure() -> None:
    doc = yaml.safe_load((REPO / "ci" / "gitlab" / "engine-matrix.yml").read_text())
    stages = doc["stages"]
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and k != "variables"}
    for name, job in jobs.items():
        assert job["stage"] in stages
        assert ("script" in job) != ("trigger" in job), name
    inc = jobs["engines"]["trigger"]["include"][0]
    assert inc["job"] in jobs and inc["artifact"] in jobs[inc["job"]]["artifacts"]["paths"]


@pytest.mark.parametrize("script", ["gpu-e2e.sh", "setup.sh", "ci-gpu-job.sh"])
def test_shell_scripts_parse(script: str) -> None:
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / script)]).returncode == 0


def test_gpu_e2e_dry_run_prints_every_step_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "HOME": str(tmp_path)}
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-e2e.sh"), "--dry-run", "engine_specs/llama-3.1-8b-fp8.yaml", "c1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("== step ")]
    assert len(steps) >= 12
    text = r.stderr
    for needle in (
        "scripts/ci-gpu-job.sh check",  # the container's Python and TensorRT-LLM
        "plan engine_specs/llama-3.1-8b-fp8.yaml --cell c1 --explain",
        "scripts/ci-gpu-job.sh quantize",
        "build engine_specs/llama-3.1-8b-fp8.yaml --cell c1 --timeout",
        "triton emit engine_specs/llama-3.1-8b-fp8.yaml --cell c1 --engine",
        "triton lint",
        "--engines-root /engines",
        "decoupled=False",
        '"early_stopping"',  # an optional 1.x input sent to the tensorrt_llm model
        "repo-llmapi",
        "pip wheel . --no-deps",
        "bench --url",
        "diagnose --metrics-url",
    ):
        assert needle in text, needle
    assert "dry run: nothing was run" in text and not out.exists()


def test_a_draft_target_cell_is_cached_only_with_its_draft_engine(cli: Cli, tmp_path: Path) -> None:
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = "hf://org/target@main"
    d["speculative"] = {"mode": "draft_target", "max_draft_len": 4, "draft": {"source": "hf://org/draft@main"}}
    d["serving"].update(streaming=False, decoupled=False)
    spec = tmp_path / "dt.yaml"
    spec.write_text(yaml.safe_dump(d))
    reg = tmp_path / "reg"
    m = json.loads(cli("matrix", spec, "--format", "json", "--registry", reg).stdout)
    (b,) = m["build"]
    assert b["draft_engine_key"] and b["draft_engine_key"] != b["engine_key"] and not b["cached"]
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    open_registry(str(reg)).put(b["engine_key"], tmp_path / "eng")
    (b,) = json.loads(cli("matrix", spec, "--format", "json", "--registry", reg).stdout)["build"]
    assert not b["cached"], "the target alone is not the cell: its draft engine still has to be built"
    open_registry(str(reg)).put(b["draft_engine_key"], tmp_path / "eng")
    (b,) = json.loads(cli("matrix", spec, "--format", "json", "--registry", reg).stdout)["build"]
    assert b["cached"]
