"""The CI definitions and what `toolchain matrix` writes, checked by the tools their users run: actionlint (with
shellcheck on every `run:` script) and GitHub's workflow schema, GitLab's CI schema, `sh -n` and shellcheck on
every script line, for every shipped spec with nothing, part and all of it in the registry (tests/validators.py)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPECS, Cli
from tests.validators import actionlint, schema, shell, tool
from toolchain.pipeline.matrix import build_matrix, github, gitlab, gitlab_yaml

pytestmark = [pytest.mark.slow, pytest.mark.validator]

ALL = sorted(SPECS.glob("*.yaml"))
GH = REPO / "ci" / "github"
GL = REPO / "ci" / "gitlab"
META = ("stages", "default", "variables")


def _matrix(cached: str) -> dict[str, list[dict[str, Any]]]:
    """The shipped specs' matrix with no cell, every other cell or every cell in the registry."""
    m = build_matrix(ALL)
    for i, b in enumerate(m["build"]):
        b["cached"] = cached == "all" or (cached == "part" and i % 2 == 0)
    return m


CACHED = ["none", "part", "all"]


def _script_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for name, job in doc.items():
        if isinstance(job, dict):
            for key in ("before_script", "script", "after_script"):
                for i, line in enumerate(job.get(key, [])):
                    out.append((f"{name}.{key}[{i}]", line))
    return out


@pytest.mark.parametrize("cached", CACHED)
def test_gitlab_child_pipeline_passes_gitlabs_schema_and_sh(cached: str, tmp_path: Path) -> None:
    doc = gitlab(_matrix(cached))
    f = tmp_path / "child-pipeline.yml"
    f.write_text(gitlab_yaml(doc))
    r = schema("vendor.gitlab-ci", [f])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _script_lines(doc)
    assert lines
    for i, (_where, line) in enumerate(lines):
        shell(line, tmp_path, f"line{i}.sh")  # GitLab runs each line in the image's shell (sh where no bash)
    if cached == "all":
        assert list(k for k in doc if k not in META) == ["nothing-to-build"]
        # the line the all-cached child pipeline runs succeeds in sh (it used to be a syntax error)
        r2 = subprocess.run(["sh", "-c", doc["nothing-to-build"]["script"][0]], capture_output=True, text=True)
        assert r2.returncode == 0 and "(17 cells)" in r2.stdout, r2.stderr


def test_gitlab_parent_pipeline_passes_schema_and_sh(tmp_path: Path) -> None:
    f = GL / "engine-matrix.yml"
    r = schema("vendor.gitlab-ci", [f])
    assert r.returncode == 0, r.stdout + r.stderr
    for i, (_where, line) in enumerate(_script_lines(yaml.safe_load(f.read_text()))):
        shell(line, tmp_path, f"p{i}.sh")


def _workflows(tmp_path: Path) -> Path:
    """ci/github/*.yml laid out as a repository's .github/workflows (where `uses: ./.github/...` resolves)."""
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    for p in GH.glob("*.yml"):
        shutil.copyfile(p, wf / p.name)
    shutil.copyfile(GH / "actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")  # the GPU runner labels
    return wf


def test_actionlint_config_lists_every_default_runner_label() -> None:
    from toolchain.pipeline.matrix import DEFAULT_RUNNERS

    cfg = yaml.safe_load((GH / "actionlint.yaml").read_text())
    assert set(cfg["self-hosted-runner"]["labels"]) == set(DEFAULT_RUNNERS.values())


def test_github_workflows_pass_actionlint_and_schema(tmp_path: Path) -> None:
    wf = _workflows(tmp_path)
    r = actionlint(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = schema("vendor.github-workflows", sorted(wf.glob("*.yml")))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("cached", CACHED)
def test_github_matrices_inlined_pass_actionlint_and_schema(cached: str, tmp_path: Path) -> None:
    """Each matrix `toolchain matrix --format github` emits, written into the workflow in place of its
    fromJSON(...) (what GitHub evaluates), passes the workflow schema and actionlint."""
    out = github(_matrix(cached))
    wf = _workflows(tmp_path)
    for v in [out["quantize"]] + [out[f"build_{i}"] for i in range(4)]:
        for entry in v["include"]:
            assert None not in entry.values(), entry
    cells = yaml.safe_load((wf / "build-cells.yml").read_text())
    main = yaml.safe_load((wf / "engine-matrix.yml").read_text())
    inlined = []
    if out["build_0"]["include"]:
        c = copy.deepcopy(cells)
        c["jobs"]["build"]["strategy"]["matrix"] = out["build_0"]
        inlined.append(("build-cells-inlined.yml", c))
    if out["quantize"]["include"]:
        q = copy.deepcopy(main)
        q["jobs"]["quantize"]["strategy"]["matrix"] = out["quantize"]
        inlined.append(("engine-matrix-inlined.yml", q))
    if cached == "all":
        assert not inlined and out["build_0_count"] == 0 and len(out["cached"]) == 17
    for name, doc in inlined:
        doc["on"] = doc.pop(True)  # YAML 1.1 read `on:` as True
        (wf / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    r = schema("vendor.github-workflows", sorted(wf.glob("*.yml")))
    assert r.returncode == 0, r.stdout + r.stderr
    r = actionlint(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    "script", ["ci-gpu-job.sh", "ci-aws-web-identity.sh", "setup.sh", "gpu-e2e.sh"], ids=lambda s: s
)
def test_ci_scripts_pass_shellcheck(script: str) -> None:
    r = subprocess.run([tool("shellcheck"), "-x", f"scripts/{script}"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# --- the container the spec names --------------------------------------------------------------------------


def _spec_in(tmp_path: Path, container: str | None, trtllm: str, trt: str | None, runtime: str = "tensorrt") -> Path:
    d = yaml.safe_load((SPECS / "llama-3.1-8b-fp8.yaml").read_text())
    d["runtime"] = runtime
    d["target"].update(trtllm_version=trtllm)
    if trt is not None:
        d["target"]["tensorrt_version"] = trt
    if container is None:
        d["target"].pop("container", None)
    else:
        d["target"]["container"] = container
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_jobs_run_in_the_container_the_spec_names(cli: Cli, tmp_path: Path) -> None:
    old = "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3"
    spec = _spec_in(tmp_path, old, "1.0.0", "10.11")
    assert cli("spec", "validate", spec).exit_code == 0
    r = cli("matrix", spec, "--format", "github", "--offline")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    entries = out["quantize"]["include"] + out["build_0"]["include"]
    assert entries and {e["container"] for e in entries} == {old}
    # the GitHub jobs take their container from the entry, not a fixed image
    gh_jobs = [
        yaml.safe_load((GH / "engine-matrix.yml").read_text())["jobs"]["quantize"],
        yaml.safe_load((GH / "build-cells.yml").read_text())["jobs"]["build"],
    ]
    for job in gh_jobs:
        assert job["container"]["image"] == "${{ matrix.container }}"
    r = cli("matrix", spec, "--format", "gitlab", "--offline")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    jobs = {k: v for k, v in doc.items() if k not in META}
    assert jobs and {j["image"] for j in jobs.values()} == {old}


def test_a_spec_without_a_container_gets_the_one_that_ships_its_release(cli: Cli, tmp_path: Path) -> None:
    r = cli("matrix", _spec_in(tmp_path, None, "1.0.0", "10.11"), "--format", "json", "--offline")
    assert r.exit_code == 0, r.output
    assert {b["container"] for b in json.loads(r.stdout)["build"]} == {
        "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3"
    }
    r = cli("matrix", _spec_in(tmp_path, None, "1.2.1", None), "--format", "json", "--offline")
    assert {b["container"] for b in json.loads(r.stdout)["build"]} == {  # the newest of 26.04-26.07
        "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    }
    r = cli("matrix", _spec_in(tmp_path, None, "1.3.0rc29", None, "pytorch"), "--format", "json", "--offline")
    assert r.exit_code == 2 and "no Triton container ships TensorRT-LLM 1.3.0rc29" in r.output


# --- GitLab's limits ----------------------------------------------------------------------------------------


def _synthetic(n: int, spec: str = "s.yaml") -> dict[str, Any]:
    q = [{"id": "q-0", "spec": spec, "runner": "gpu-h100"}]
    b = [
        {"id": f"b-{i:04d}", "spec": spec, "cell": f"c{i}", "runner": "gpu-h100", "cached": False, "needs": "q-0"}
        for i in range(n)
    ]
    return {"quantize": q, "build": b}


def test_gitlab_pipeline_size_limits_are_enforced(cli: Cli) -> None:
    from toolchain.errors import UserInputError

    assert len([k for k in gitlab(_synthetic(499)) if k not in META]) == 500  # 1 quantize + 499 builds
    with pytest.raises(UserInputError, match="501 jobs exceed the 500 jobs GitLab allows"):
        gitlab(_synthetic(500))
    assert len(gitlab(_synthetic(1400), max_jobs=1500)) > 1400  # a Premium instance's limit, given explicitly
    with pytest.raises(UserInputError, match="5,242,880 bytes"):
        gitlab(_synthetic(400, spec="x" * 15_000), max_jobs=2000)  # long paths: past the 5 MB child YAML
    r = cli("matrix", *ALL, "--format", "gitlab", "--offline", "--gitlab-max-jobs", "5")
    assert r.exit_code == 2 and "jobs exceed the 5 jobs GitLab allows" in r.output and "Traceback" not in r.output


# --- registry credentials -----------------------------------------------------------------------------------

AWS_ACTION = re.compile(r"^aws-actions/configure-aws-credentials@[0-9a-f]{40}$")


def _steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if s.get("uses", "").startswith(action)]


def test_github_jobs_get_registry_credentials() -> None:
    main = yaml.safe_load((GH / "engine-matrix.yml").read_text())
    cells = yaml.safe_load((GH / "build-cells.yml").read_text())
    for doc in (main, cells):
        assert doc["permissions"]["id-token"] == "write"  # OIDC role assumption
    for job in (main["jobs"]["plan"], main["jobs"]["quantize"], cells["jobs"]["build"]):
        (step,) = _steps_using(job, "aws-actions/configure-aws-credentials")
        assert AWS_ACTION.match(step["uses"]), "third-party action pinned by commit"
        assert step["with"]["role-to-assume"] == "${{ vars.AWS_ROLE_ARN }}"
        assert step["with"]["aws-access-key-id"] == "${{ secrets.AWS_ACCESS_KEY_ID }}"
        assert "s3://" in step["if"]
        names = [s.get("name", "") + s.get("run", "") + s.get("uses", "") for s in job["steps"]]
        first_toolchain = next(i for i, n in enumerate(names) if "toolchain" in n or "ci-gpu-job" in n)
        assert job["steps"].index(step) < first_toolchain  # credentials before the registry is used
    env = {**main["env"], **cells["jobs"]["build"]["env"]}
    assert env["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"


def test_gitlab_jobs_get_an_oidc_token_and_use_it(tmp_path: Path) -> None:
    parent = yaml.safe_load((GL / "engine-matrix.yml").read_text())
    gen = parent["generate-matrix"]
    assert gen["id_tokens"]["AWS_ID_TOKEN"]["aud"] == "sts.amazonaws.com"
    assert ". scripts/ci-aws-web-identity.sh" in gen["script"]
    child = gitlab(_synthetic(1))
    assert child["default"]["id_tokens"]["AWS_ID_TOKEN"]["aud"] == "sts.amazonaws.com"
    assert ". scripts/ci-aws-web-identity.sh" in (REPO / "scripts" / "ci-gpu-job.sh").read_text()
    # the sourced script hands the token to the AWS SDK as a private file, only when a role is configured
    probe = '. scripts/ci-aws-web-identity.sh; printf "%s" "${AWS_WEB_IDENTITY_TOKEN_FILE:-none}"'
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "AWS_ID_TOKEN": "header.payload.sig"}
    r = subprocess.run(["sh", "-c", probe], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "none"
    role = {**env, "AWS_ROLE_ARN": "arn:aws:iam::1:role/ci"}
    r = subprocess.run(["sh", "-c", probe], cwd=REPO, env=role, capture_output=True, text=True)
    token = Path(r.stdout)
    assert r.returncode == 0 and token.read_text() == "header.payload.sig"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


def test_docs_name_every_credential_the_ci_reads() -> None:
    text = "".join(p.read_text() for p in [*GH.glob("*.yml"), *GL.glob("*.yml")])
    names = set(re.findall(r"\$\{\{ (?:secrets|vars)\.(\w+)", text))
    names |= {"AWS_ROLE_ARN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"}  # GitLab CI/CD variables
    page = (REPO / "docs" / "matrix.md").read_text()
    section = page[page.index("## CI credentials") :]
    missing = sorted(n for n in names if n not in section)
    assert not missing, f"docs/matrix.md's CI credentials section does not name {missing}"
