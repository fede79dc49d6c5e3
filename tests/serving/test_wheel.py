"""The toolchain as users install it: `pip wheel`, then a non-editable install into a fresh venv.

The venv is made here and cannot see the checkout: it has no PYTHONPATH, runs outside the repository, and
gets the third-party dependencies (torch, pydantic, typer...) from the test's own environment through one
plain path line in a ``.pth`` file, which puts that site-packages on ``sys.path`` without running its ``.pth``
files (so the editable install of the checkout living there is never hooked in). Every command's main path
then runs from the installed wheel (measured before: `spec validate` failed with ModuleNotFoundError
`toolchain.specs`, since ``toolchain/specs/`` had no ``__init__.py`` and ``find_packages`` left it out, while the
old test passed on the editable install).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# The directories whose files the wheel must carry, and where each lands inside it (setup.py's package_dir).
SHIPPED = {"toolchain": "toolchain", "triton_repo": "toolchain/triton_repo"}
# pip's flags for building a source tree with this environment's setuptools and nothing from an index
OFFLINE_SOURCE_INSTALL = ("--no-deps", "--no-index", "--no-build-isolation", "-q")


def _source_files() -> list[str]:
    """The files of a fresh clone (git's list when this is a checkout; otherwise the tree minus caches)."""
    if (REPO / ".git").exists():
        r = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60)
        files = [f for f in r.stdout.decode().split("\0") if f]
        return [f for f in files if (REPO / f).is_file()]  # deleted but not yet committed
    return [
        str(p.relative_to(REPO))
        for p in REPO.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".venv" not in p.parts and ".git" not in p.parts
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel` builds from a copy of the clone (the checkout itself is left unbuilt)."""
    src = tmp_path_factory.mktemp("src")
    for rel in _source_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return next(out.glob("toolchain-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel, non-editable; dependencies from this environment's site-packages."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    py = root / "bin" / "python"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()] or [sysconfig.get_paths()["purelib"]]
    (_purelib(py) / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in deps))
    return root


def _purelib(python: Path) -> Path:
    """The site-packages directory of the venv ``python`` belongs to."""
    r = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(r.stdout.strip())


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["HOME"] = str(tmp / "home")
    env["TOOLCHAIN_CACHE"] = str(tmp / "home" / ".cache" / "toolchain")
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("TOOLCHAIN_REGISTRY", None)
    return env


def _toolchain(venv: Path, tmp: Path, *args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [str(venv / "bin" / "toolchain"), *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(tmp),
        cwd=tmp,
        timeout=timeout,
    )
    assert r.returncode == 0, f"toolchain {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return r


def test_the_wheel_carries_every_file_of_the_package(wheel: Path) -> None:
    """Every file the package may read (modules, templates, scripts, model sources) is in the wheel, at the
    place the installed code looks for it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = []
    for rel in _source_files():
        top, _, rest = rel.partition("/")
        if top in SHIPPED and rest:
            wanted.append(f"{SHIPPED[top]}/{rest}")
    assert len(wanted) > 100
    missing = sorted(n for n in wanted if n not in names)
    assert not missing, f"not in the wheel: {missing}"


def test_the_installed_wheel_is_what_runs(venv: Path, tmp_path: Path) -> None:
    code = (
        "import json, sys, importlib.metadata as md, toolchain, toolchain.specs\n"
        "print(json.dumps({'file': toolchain.__file__, 'path': sys.path,"
        " 'meta_path': [repr(f) for f in sys.meta_path], 'dist': str(md.distribution('toolchain').locate_file(''))}))\n"
    )
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    seen = json.loads(r.stdout)
    assert Path(seen["file"]).resolve().is_relative_to(venv.resolve()), seen["file"]
    assert Path(seen["dist"]).resolve().is_relative_to(venv.resolve()), seen["dist"]
    # the only entries under the checkout are the dependency site-packages the test's .pth names (the
    # checkout's .venv on a fresh clone); never the checkout's sources
    inside = [p for p in seen["path"] if p and Path(p).resolve().is_relative_to(REPO.resolve())]
    assert not [p for p in inside if Path(p).name != "site-packages"], seen["path"]
    assert not [f for f in seen["meta_path"] if "editable" in f.lower()], seen["meta_path"]


def _bench_result(venv: Path, tmp: Path) -> Path:
    """A small benchmark result, made by the installed package's own metrics code."""
    path = tmp / "result.json"
    code = (
        "import json, sys\n"
        "from toolchain.bench.metrics import RequestRecord, aggregate\n"
        "recs = [RequestRecord(i, 8, 5, 0.0, chunk_times=[0.05 + k * 0.01 for k in range(5)], output_tokens=5)"
        " for i in range(6)]\n"
        "run = {'load': {'concurrency': 1}, 'label': 'concurrency=1',"
        " 'summary': aggregate(recs, 1.0, {'ttft_ms': 400.0, 'tpot_ms': 40.0}), 'server': None, 'client': {},"
        " 'prefix': None, 'records': [r.to_json() for r in recs], 'interrupted': None}\n"
        "doc = {'kind': 'toolchain.bench-result', 'schema': 1, 'created': '2026-11-29T12:00:00+00:00',"
        " 'provenance': {'model': 'ensemble', 'url': '127.0.0.1:8001', 'protocol': 'triton'},"
        " 'planner': None, 'runs': [run], 'interrupted': None, 'stop': None}\n"
        "open(sys.argv[1], 'w').write(json.dumps(doc))\n"
    )
    subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, str(path)], env=_env(tmp), cwd=tmp, check=True, timeout=120
    )
    return path


def test_every_command_runs_from_the_installed_wheel(venv: Path, tmp_path: Path, tiny_spec: Path) -> None:
    """The main path of each command, from the console script the wheel installed."""
    from toolchain import __version__

    assert _toolchain(venv, tmp_path, "--version").stdout.strip() == f"toolchain {__version__}"
    assert json.loads(_toolchain(venv, tmp_path, "gpus", "--json").stdout)
    assert json.loads(_toolchain(venv, tmp_path, "spec", "schema").stdout)["title"] == "toolchain engine spec"
    for spec in (tiny_spec, *sorted((REPO / "engine_specs").glob("*.yaml"))):
        _toolchain(venv, tmp_path, "spec", "validate", spec)
    cells = json.loads(_toolchain(venv, tmp_path, "spec", "expand", tiny_spec, "--json").stdout)["cells"]
    assert cells
    assert json.loads(_toolchain(venv, tmp_path, "plan", tiny_spec, "--json").stdout)["cells"]
    _toolchain(venv, tmp_path, "plan", REPO / "engine_specs" / "llama-3.3-70b-fp8-h200.yaml", "--explain")
    _toolchain(venv, tmp_path, "build", tiny_spec, "--all", "--dry-run")
    assert json.loads(_toolchain(venv, tmp_path, "matrix", tiny_spec, "--offline", "--format", "json").stdout)
    _toolchain(venv, tmp_path, "matrix", tiny_spec, "--offline", "--format", "github")
    registry, entry = tmp_path / "registry", tmp_path / "entry"
    entry.mkdir()
    (entry / "rank0.engine").write_bytes(b"not an engine")
    _toolchain(venv, tmp_path, "cache", "push", entry, "--registry", registry)
    listed = json.loads(_toolchain(venv, tmp_path, "cache", "ls", "--registry", registry, "--json").stdout)
    assert len(listed["entries"]) == 1
    _toolchain(venv, tmp_path, "cache", "verify", "--registry", registry)
    key = listed["entries"][0]["key"]
    _toolchain(venv, tmp_path, "cache", "show", key, "--registry", registry)
    _toolchain(venv, tmp_path, "cache", "pull", key, tmp_path / "pulled", "--registry", registry)
    assert (tmp_path / "pulled" / "rank0.engine").read_bytes() == b"not an engine"
    _toolchain(venv, tmp_path, "deploy", tiny_spec, "--dry-run")

    repo = tmp_path / "repo"
    _toolchain(venv, tmp_path, "triton", "emit", tiny_spec, "--reference", "--out", repo)
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls", "tensorrt_llm"):
        assert (repo / model / "1" / "model.py").is_file(), model
    _toolchain(venv, tmp_path, "triton", "lint", repo)

    report, result = tmp_path / "report", _bench_result(venv, tmp_path)
    _toolchain(venv, tmp_path, "bench", "report", result, "--out", report)
    assert {p.suffix for p in report.iterdir()} >= {".html", ".md"}
    r = subprocess.run(
        [str(venv / "bin" / "toolchain"), "diagnose", "--bench", str(result), "--json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr  # 1: findings
    assert json.loads(r.stdout)


def _copy_sources(dockerfile: str) -> list[str]:
    """The context paths each COPY of a Dockerfile reads (every argument but the last; no --from stages here)."""
    sources = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            args = [a for a in line.split()[1:] if not a.startswith("--")]
            sources += args[:-1]
    return sources


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _package_dir(python: Path, tmp: Path) -> Path:
    r = subprocess.run(
        [str(python), "-c", "import toolchain, pathlib; print(pathlib.Path(toolchain.__file__).parent)"],
        capture_output=True,
        text=True,
        env=_env(tmp),
        cwd=tmp,
        check=True,
        timeout=60,
    )
    return Path(r.stdout.strip())


@pytest.mark.validator  # hadolint
def test_deploy_from_the_installed_wheel(venv: Path, tmp_path: Path, tiny_spec: Path) -> None:
    """`toolchain deploy` for real from the wheel (before: exit 2, "run toolchain deploy from a clone", since the
    build context needed pyproject.toml beside the package): every COPY source of the Dockerfile is in the
    context, hadolint passes it, and the context's src/ installs, offline, exactly the package that wrote it."""
    from tests.validators import hadolint

    out = tmp_path / "deploy"
    _toolchain(venv, tmp_path, "deploy", tiny_spec, "--out", out, "--registry", "s3://engines/prod")
    ctx = out / "image"
    dockerfile = (ctx / "Dockerfile").read_text()
    sources = _copy_sources(dockerfile)
    assert {"src", "entrypoint.sh", "model_repository"} <= set(sources), sources
    assert not [s for s in sources if not (ctx / s).exists()], sources
    r = hadolint(ctx / "Dockerfile")
    assert r.returncode == 0, r.stdout + r.stderr

    scratch = tmp_path / "scratch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(scratch)], check=True, timeout=120)
    py = scratch / "bin" / "python"
    purelib = _purelib(venv / "bin" / "python")
    shutil.copyfile(purelib / "zz_test_dependencies.pth", _purelib(py) / "zz_test_dependencies.pth")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", *OFFLINE_SOURCE_INSTALL, str(ctx / "src")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    built = _package_dir(py, tmp_path)
    assert built.resolve().is_relative_to(scratch.resolve()), built
    assert _files(built) == _files(purelib / "toolchain")
    version = subprocess.run(
        [str(scratch / "bin" / "toolchain"), "--version"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
    )
    assert version.stdout.strip() == _toolchain(venv, tmp_path, "--version").stdout.strip(), version.stderr


def test_quantize_from_the_installed_wheel(venv: Path, tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The heavy path too: ModelOpt quantization of the tiny checkpoint, driven by the installed package."""
    out = tmp_path / "q"
    _toolchain(
        venv,
        tmp_path,
        "quantize",
        "--checkpoint",
        tiny_checkpoint,
        "--weights",
        "fp8",
        "--out",
        out,
        "--calib-samples",
        "4",
        "--calib-seq-len",
        "16",
        timeout=600,
    )
    assert (out / "manifest.json").is_file()
    assert (out / "trtllm" / "config.json").is_file()


def test_a_copied_tiny_spec_gets_its_checkpoint_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """engine_specs/tiny.yaml copied out of the checkout: its error names `toolchain tiny-checkpoint` with the
    directory (before: scripts/make_tiny_checkpoint.py, which the wheel lacks), and that command makes it."""
    spec = tmp_path / "specs" / "tiny.yaml"
    spec.parent.mkdir()
    shutil.copyfile(REPO / "engine_specs" / "tiny.yaml", spec)
    where = tmp_path / ".work" / "tiny-llama"
    r = subprocess.run(
        [str(venv / "bin" / "toolchain"), "plan", str(spec)],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode != 0
    command = f"toolchain tiny-checkpoint --out {where}"
    assert command in r.stderr, r.stderr
    made = _toolchain(venv, tmp_path, *command.split()[1:], timeout=600)
    assert made.stdout.strip() == str(where.resolve())
    assert json.loads(_toolchain(venv, tmp_path, "plan", spec, "--json").stdout)["cells"]
