"""The consumers' own validators, run on what the toolchain writes: actionlint and check-jsonschema (its vendored
GitHub-workflow and GitLab-CI schemas) for CI definitions, ``sh -n`` and shellcheck for shell, hadolint for
Dockerfiles, checkov for Kubernetes manifests and Dockerfiles.

scripts/setup.sh installs all of them (the README's test command runs it first): actionlint, check-jsonschema
and hadolint into .venv (pinned in pyproject's dev extras), checkov into .venv-tools (its pins would
downgrade packages the project pins), shellcheck from Debian. A missing tool FAILS the test that needs it,
never skips it: a skip would let CI pass without the check.

``CHECKOV_SKIPS`` is the one place a checkov check is left out, each with its reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
_VENV_BIN = Path(sys.executable).parent
_TOOLS_BINS = (REPO / ".venv-tools" / "bin", Path(sys.prefix).resolve().parent / ".venv-tools" / "bin")

# checkov check -> why the generated manifests do not follow it. Checks not listed here must pass. Some
# apply only to some manifest sets; CHECKOV_SKIPS_WHEN says which (the reason is still here, once).
CHECKOV_SKIPS = {
    "CKV_K8S_11": "no CPU limit: a CFS quota throttles the server's decode loop and the tokenizers in bursts "
    "(latency spikes at no saving); the CPUs are requested, which is what the scheduler reserves",
    "CKV_K8S_22": "no read-only root filesystem: not part of the Pod Security Standards' restricted profile; the "
    "entrypoint, Open MPI and the Python backend write under /tmp, and every other path the server and "
    "TensorRT-LLM write would need a volume, which cannot be found out without a GPU run",
    "CKV_K8S_35": "registry credentials as environment variables (envFrom a Secret, by reference): boto3 and "
    "huggingface_hub read AWS_* and HF_TOKEN from the environment, and the entrypoint passes them on to them",
    "CKV_K8S_40": "uid 1000, not >= 10000: the image's own non-root user (triton-server, uid/gid 1000, created by "
    "triton-inference-server/server build.py), which owns the server's files and has a home",
    "CKV_DOCKER_2": "no HEALTHCHECK: Kubernetes ignores it; the manifests' startup, readiness and liveness probes "
    "check the server",
    # conditional (see CHECKOV_SKIPS_WHEN)
    "CKV_K8S_43": "an image named by tag is accepted: `toolchain deploy` says to pin its digest after the push "
    "(kustomize edit set image), and pulls a tag Always; sets written with --image REPO@sha256:... pass it",
    "CKV_K8S_21": "written without --namespace, the manifests name namespace 'default' explicitly (so the "
    "autoscaler's query and kubectl agree); with --namespace they pass it",
    "CKV_K8S_38": "a multi-node group's leader mounts a service-account token: it lists its group's pods and starts "
    "ranks in them with kubectl exec (kubessh); workers and single-node pods mount none",
    "CKV_K8S_8": "a multi-node worker has no liveness probe: its ranks are started by the leader's mpirun, a failed "
    "rank fails the leader, and the LeaderWorkerSet recreates the whole group (RecreateGroupOnPodRestart); a "
    "Dynamo component's probes are the Dynamo operator's own (a worker's /health can say notready while it "
    "serves, so the toolchain writes none of its own)",
    "CKV_K8S_9": "a Dynamo component has no readiness probe of the toolchain's: the Dynamo operator adds its own "
    "to the pods it makes from the DynamoGraphDeployment (see CKV_K8S_8)",
}
CHECKOV_SKIPS_WHEN: dict[str, tuple[str, ...]] = {
    "CKV_K8S_43": ("image by tag",),
    "CKV_K8S_21": ("no --namespace",),
    "CKV_K8S_38": ("group leader pod",),
    "CKV_K8S_8": ("group worker pod", "dynamo component pod"),
    "CKV_K8S_9": ("dynamo component pod",),
}
ALWAYS_SKIPPED = sorted(set(CHECKOV_SKIPS) - set(CHECKOV_SKIPS_WHEN))


def tool(name: str) -> str:
    """The path of a validator, where scripts/setup.sh installs it; the test fails when it is missing."""
    for d in (_VENV_BIN, *_TOOLS_BINS):
        if (d / name).is_file():
            return str(d / name)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed — run scripts/setup.sh (it installs every validator the tests run)")
    return found


def run(args: list[str], *, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def must_pass(args: list[str], *, cwd: Path | None = None, what: str = "") -> None:
    r = run(args, cwd=cwd)
    assert r.returncode == 0, f"{what or args[0]} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"


def actionlint(workflows_root: Path) -> subprocess.CompletedProcess[str]:
    """actionlint (with shellcheck on every `run:` script) over ``workflows_root/.github/workflows``."""
    files = sorted(str(p) for p in (workflows_root / ".github" / "workflows").glob("*.yml"))
    cfg = workflows_root / ".github" / "actionlint.yaml"  # found by the .git root, which a test tree lacks
    opts = [f"-config-file={cfg}"] if cfg.is_file() else []
    lint = [tool("actionlint"), f"-shellcheck={tool('shellcheck')}", "-no-color", *opts]
    return run([*lint, *files], cwd=workflows_root)


def schema(builtin: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against one of its vendored schemas (vendor.github-workflows, vendor.gitlab-ci)."""
    return run([tool("check-jsonschema"), "--builtin-schema", builtin, *map(str, files)])


def shell(script: str, where: Path, name: str, *, dialect: str = "sh") -> None:
    """``sh -n`` (or bash -n) and shellcheck on a script or a script line, written to ``where/name``."""
    f = where / name
    f.write_text(f"#!/bin/{dialect}\n{script}\n" if not script.startswith("#!") else script)
    must_pass([dialect, "-n", str(f)], what=f"{dialect} -n on {name}")
    must_pass([tool("shellcheck"), "-s", dialect, "-x", str(f)], what=f"shellcheck on {name}:\n{script}")


def hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return run([tool("hadolint"), "--no-color", str(dockerfile)])


def checkov(root: Path, frameworks: tuple[str, ...] = ("kubernetes", "dockerfile")) -> list[dict[str, Any]]:
    """checkov over every file under ``root`` (one run: checkov takes ~10 s to start); its failed checks,
    each with ``file_path`` relative to ``root`` and ``check_id``. Nothing is skipped here: callers compare
    against ``CHECKOV_SKIPS``."""
    r = run(
        [tool("checkov"), "-d", str(root), "--framework", *frameworks, "-o", "json", "--quiet", "--compact"],
        timeout=600,
    )
    assert r.returncode in (0, 1), f"checkov did not run ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    data = json.loads(r.stdout) if r.stdout.strip() else []
    reports = data if isinstance(data, list) else [data]
    failed: list[dict[str, Any]] = []
    for rep in reports:
        if not isinstance(rep, dict) or "results" not in rep:
            continue
        for c in rep["results"].get("failed_checks", []):
            failed.append({"file": c["file_path"].lstrip("/"), "check_id": c["check_id"], "name": c["check_name"]})
    return failed
