"""Shared fixtures: every home and cache path lives in tmp; CLI runner helper."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from typer.testing import CliRunner, Result

# A shell starts a background job (`... &` without job control) with SIGINT ignored, and every process it
# starts inherits that: the tests that press Ctrl-C (on a pty, or SIGINT to a child) then wait forever. Python
# handling SIGINT here makes the children the tests start get the default disposition again (exec resets a
# handled signal), however the suite itself was launched.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "engine_specs"
FIXTURES = Path(__file__).resolve().parent / "specs"


def _local_source(spec: Path) -> bool:
    source = str((yaml.safe_load(spec.read_text()).get("model") or {}).get("source", ""))
    return source.startswith(("../", "./", "/"))


# The shipped specs whose model is named on the Hub. The others (tiny.yaml, tiny-engine.yaml) point at
# ../.work/tiny-llama, which only the README's first command creates: a fresh clone (CI) has none, so a test that
# needs the tiny model writes its spec with write_tiny_spec and the session's tiny_checkpoint.
HUB_SPECS = sorted(p for p in SPECS.glob("*.yaml") if not _local_source(p))


def every_shipped_spec(ckpt: Path, tmp: Path) -> list[Path]:
    """Every shipped spec, those with a local model copied into ``tmp`` with their model at ``ckpt``."""
    out = list(HUB_SPECS)
    for p in sorted(set(SPECS.glob("*.yaml")) - set(HUB_SPECS)):
        d = yaml.safe_load(p.read_text())
        d["model"]["source"] = str(ckpt)
        (tmp / p.name).write_text(yaml.safe_dump(d))
        out.append(tmp / p.name)
    return out


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(home / ".cache" / "toolchain"))
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TOOLCHAIN_REGISTRY", raising=False)
    monkeypatch.delenv("TOOLCHAIN_DEBUG", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # .ci/run's --durations: not for the pytest runs tests start
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    # a developer's signing setup would sign every put and require a signature of every restore
    for var in ("TOOLCHAIN_SIGNING_KEY", "TOOLCHAIN_VERIFY_KEY", "TOOLCHAIN_SIGNING_PASSWORD", "COSIGN_PASSWORD"):
        monkeypatch.delenv(var, raising=False)


class Cli(Protocol):
    """The ``cli`` fixture: run ``toolchain ARGS...`` in-process; arguments are str()-ed."""

    def __call__(self, *args: object, input: str | None = None) -> Result: ...


@pytest.fixture
def cli() -> Cli:
    from toolchain.cli.main import app

    runner = CliRunner()

    def invoke(*args: object, input: str | None = None) -> Result:
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """What ``build(directory)`` makes, made once per run and shared by the pytest-xdist workers (each is a session
    of its own): the first to ask builds it under a lock in the run's common temporary directory, the others wait
    and read it. Read-only for the tests: one that changes it works on a copy. A build that failed is redone."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # <basetemp>/popen-gwN: the parent is the run's, common to the workers
    where = root / f"built-{name}"
    with FileLock(str(where) + ".lock"):
        done = where / ".built"
        if not done.is_file():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            done.write_text(str(build(where).relative_to(where)))
        return where / done.read_text()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama + BPE tokenizer, built locally once per test run."""
    from toolchain.quantize.tiny import make_tiny_checkpoint

    return built_once(tmp_path_factory, "tiny-llama", lambda d: make_tiny_checkpoint(d / "tiny-llama"))


# engine_specs/tiny.yaml's calibration (quantization.calibration), written out so that tests do not read it from
# the modules they check.
SPEC_CALIB: dict[str, Any] = {"samples": 16, "seq_len": 64, "batch_size": 4}


@pytest.fixture(scope="session")
def tiny_fp8(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """engine_specs/tiny.yaml's recipe (FP8 weights, FP8 KV) of the tiny Llama, quantized once per session (the
    runtime gate's tests and the stand-ins' numerics tests read it; none writes into it)."""
    from toolchain.artifacts.recipe import Recipe
    from toolchain.quantize.run import quantize

    return built_once(
        tmp_path_factory,
        "tiny-fp8",
        lambda d: quantize(tiny_checkpoint, Recipe("fp8", "fp8", **SPEC_CALIB), d / "q").out,
    )


def write_tiny_spec(dest: Path, ckpt: Path, *, calibration: dict[str, Any] | None = None, **serving: Any) -> Path:
    """engine_specs/tiny-engine.yaml (the tiny model on the engine path, served by the ensemble) with its
    model at ``ckpt`` (and, if given, other calibration and serving values)."""
    d = yaml.safe_load((SPECS / "tiny-engine.yaml").read_text())
    d["model"]["source"] = str(ckpt)
    d["quantization"]["calibration"].update(calibration or {})
    d["serving"].update(serving)
    dest.write_text(yaml.safe_dump(d))
    return dest
