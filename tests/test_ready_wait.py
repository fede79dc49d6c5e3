"""One readiness wait (toolchain.proc.wait_ready) for every server launcher: Triton, the Dynamo deployment.
Its deadline fires and names why, a dead process ends it at once, and an interrupted wait says so."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest

from toolchain.proc import wait_ready

PACKAGE = Path(__file__).resolve().parents[1] / "toolchain"


def test_ready_returns_once_the_check_passes() -> None:
    answers = iter(["loading", "loading", None])
    seen: list[Any] = []
    wait_ready(lambda: next(answers), timeout=60, stage="server", progress=lambda *a, **k: seen.append(a), poll=0.01)
    assert next(answers, "exhausted") == "exhausted"


def test_the_deadline_fires_and_names_why() -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"server: not ready within 0.2 s \(models LOADING\)"):
        wait_ready(lambda: "models LOADING", timeout=0.2, stage="server", poll=0.01)
    assert time.monotonic() - t0 < 20  # a ceiling many times the deadline: it fired, it did not hang


def test_the_caller_names_its_own_timeout_error() -> None:
    with pytest.raises(RuntimeError, match="gave up: still starting"):
        wait_ready(
            lambda: "still starting",
            timeout=0.05,
            stage="s",
            poll=0.01,
            on_timeout=lambda w: RuntimeError(f"gave up: {w}"),
        )


def test_a_dead_process_ends_the_wait_at_once() -> None:
    def died() -> None:
        raise ChildProcessError("exited 1")

    with pytest.raises(ChildProcessError):
        wait_ready(lambda: "loading", timeout=3600, stage="s", alive=died)


def test_an_interrupted_wait_says_interrupted_not_done() -> None:
    lines: list[str] = []

    def interrupted() -> str | None:
        raise KeyboardInterrupt

    def progress(stage: str, *a: Any, **k: Any) -> None:
        lines.append(f"{stage} {k.get('message') or ''} {a}")

    with pytest.raises(KeyboardInterrupt):
        wait_ready(interrupted, timeout=60, stage="tritonserver loading models", progress=progress)
    assert not any("done" in x for x in lines)


@pytest.mark.parametrize(("module", "function"), [("triton/server.py", "start"), ("dynamo/local.py", "_wait_ready")])
def test_launchers_wait_through_the_one_readiness_wait(module: str, function: str) -> None:
    """A launcher that polls on its own loop again (a third way to wait) fails here."""
    tree = ast.parse((PACKAGE / module).read_text())
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    calls = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "wait_ready" in calls
    assert not any(isinstance(n, ast.While) for n in ast.walk(fn))
