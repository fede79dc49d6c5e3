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


def test_github_matrix_marks_cached_cells(cli: Cli, tmp_path: Path) -> None:
    r = cli("matrix", *ALL, "--format", "github", "--registry", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    builds = m["build"]["include"]
    assert len(builds) == 13 and not any(b["cached"] for b in builds)
    for b in builds:
        assert set(b) >= {"id", "spec", "cell", "gpu", "runner", "engine_key", "cached", "needs"}
        assert b["needs"] in {q["id"] for q in m["quantize"]["include"]}
    h100 = next(b for b in builds if b["gpu"] == "H100-SXM" and b["engine_key"])
    assert h100["runner"] == "gpu-h100"
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    open_registry(str(tmp_path / "reg")).put(h100["engine_key"], tmp_path / "eng")
    m2 = json.loads(cli("matrix", *ALL, "--format", "github", "--registry", tmp_path / "reg").stdout)
    cached = [b["id"] for b in m2["build"]["include"] if b["cached"]]
    assert cached == [h100["id"]]
    # one quantize job per model x precision x mapping: the 8B spec's 8 cells share one
    q8 = [q for q in m["quantize"]["include"] if q["spec"].endswith("llama-3.1-8b-fp8.yaml")]
    assert len(q8) == 1


def test_gitlab_child_pipeline_structure(cli: Cli, tmp_path: Path) -> None:
    r = cli("matrix", *ALL, "--format", "gitlab", "--offline")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    stages = doc["stages"]
    jobs = {k: v for k, v in doc.items() if k not in ("stages", "default", "variables")}
    for name, job in jobs.items():
        assert job["stage"] in stages and job["tags"] and job["script"]
        for need in job.get("needs", []):
            assert need in jobs, f"{name} needs unknown job {need}"
    assert any("toolchain build" in j["script"][0] and "--cell" in j["script"][0] for j in jobs.values())


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
    jobs = _github_jobs(REPO / "ci" / "github" / "engine-matrix.yml")
    assert set(jobs) == {"cpu-tiny", "plan", "quantize", "build"}
    for name, job in jobs.items():
        assert "runs-on" in job and job["steps"], name
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), f"{name}: a step needs exactly one of run/uses"
        needs = job.get("needs", [])
        for n in [needs] if isinstance(needs, str) else needs:
            assert n in jobs
        matrix = job.get("strategy", {}).get("matrix")
        if matrix is not None:
            m = re.fullmatch(r"\$\{\{ fromJSON\(needs\.plan\.outputs\.(\w+)\) \}\}", matrix)
            assert m and m.group(1) in jobs["plan"]["outputs"], matrix
    assert any("toolchain build" in s.get("run", "") and "--cell" in s["run"] for s in jobs["build"]["steps"])
    assert any("upload-artifact" in s.get("uses", "") for s in jobs["build"]["steps"])
    assert "toolchain up engine_specs/tiny.yaml" in jobs["cpu-tiny"]["steps"][-1]["run"]


def test_gitlab_parent_pipeline_structure() -> None:
    doc = yaml.safe_load((REPO / "ci" / "gitlab" / "engine-matrix.yml").read_text())
    stages = doc["stages"]
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and k != "variables"}
    for name, job in jobs.items():
        assert job["stage"] in stages
        assert ("script" in job) != ("trigger" in job), name
    inc = jobs["engines"]["trigger"]["include"][0]
    assert inc["job"] in jobs and inc["artifact"] in jobs[inc["job"]]["artifacts"]["paths"]


@pytest.mark.parametrize("script", ["gpu-e2e.sh", "setup.sh"])
def test_shell_scripts_parse(script: str) -> None:
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / script)]).returncode == 0
