"""The long commands as a person runs them: on a pseudo-terminal, where rich draws bars and Ctrl-C is a key.

Each run must exit 0 and never leave the screen silent for more than 5 s (the longest gap between two
writes, start and exit included). Without a TTY (CI, CliRunner) none of this is exercised: `up` once ended
with ``ValueError: I/O operation on closed file`` only on a terminal.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, SPECS
from tests.terminal.pty_harness import PtyRun, run_on_pty, truncated_cells

pytestmark = pytest.mark.slow

SILENCE_LIMIT_S = 5.0
TOOLCHAIN = str(Path(sys.executable).with_name("toolchain"))


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLCHAIN_", "AWS_"))}
    env |= {
        "HOME": str(home),
        "TOOLCHAIN_CACHE": str(home / "cache"),
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TERM": "xterm-256color",
        "PYTHONPATH": str(REPO),  # this checkout, whatever the venv's editable install points at
        "COLUMNS": "160",
    }
    return env


def _ok(r: PtyRun) -> None:
    what = " ".join(r.argv[1:3])
    print(f"pty: {what}: exit {r.returncode}, {r.seconds:.1f} s, longest silence {r.longest_silence:.1f} s")
    assert r.returncode == 0, r.describe()
    assert "Traceback" not in r.text and "Error:" not in r.text, r.describe()
    assert r.longest_silence <= SILENCE_LIMIT_S, r.describe()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ptyhome")


@pytest.fixture(scope="module")
def up_run(home: Path) -> PtyRun:
    """`toolchain up engine_specs/tiny.yaml` on a fresh cache: checkpoint created, quantized, served, benched."""
    d = yaml.safe_load((SPECS / "tiny.yaml").read_text())
    d["model"]["source"] = str(home / "tiny-llama")
    spec = home / "tiny.yaml"
    spec.write_text(yaml.safe_dump(d))
    env = _env(home) | {"COLUMNS": "80"}  # the first-hour path at the width of most terminals and CI logs
    return run_on_pty([TOOLCHAIN, "up", str(spec), "--requests", "3"], env=env, timeout=900, cols=80)


def test_up_on_a_terminal_exits_0_and_is_never_silent(up_run: PtyRun) -> None:
    _ok(up_run)
    text = up_run.text
    assert "toolchain up tiny" in text and "stage: bench" in text  # the summary was printed
    assert re.search(r"engine key +[0-9a-f]{64}", text), text[-2000:]  # whole, to copy: never cut to "…"
    assert truncated_cells(text) == [], truncated_cells(text)
    assert "stopping tritonserver" in text  # the unload is narrated, not a silent wait
    # and its state is whole beside the bar at 80 columns (on main: "... postprocessing LOADIN…")
    stopping = [ln for ln in text.replace("\r", "\n").splitlines() if "stopping tritonserver" in ln]
    assert stopping and not [ln for ln in stopping if "…" in ln], stopping
    # the summary wraps at spaces at 80 columns (on main 11 lines were wider); only a path or key longer than a
    # line may stand alone on one
    summary = text.replace("\r", "").rsplit("toolchain up tiny", 1)[1].splitlines()
    wide = [ln for ln in summary if len(ln) > 80 and len(ln.split()) > 1]
    assert not wide, wide


def _repo(home: Path) -> Path:
    repos = list((home / "cache" / "up").glob("*/repo"))
    assert repos, "up did not leave its repository"
    return repos[0]


def test_quantize_on_a_terminal(up_run: PtyRun, home: Path) -> None:
    out = home / "q-int8"
    r = run_on_pty(
        [
            TOOLCHAIN,
            "quantize",
            "--checkpoint",
            str(home / "tiny-llama"),
            "--weights",
            "int8_sq",
            "--kv-cache",
            "none",
            "--out",
            str(out),
        ],
        env=_env(home),
        timeout=600,
    )
    _ok(r)
    assert (out / "manifest.json").is_file() or any(out.rglob("manifest.json")), r.describe()


@pytest.fixture
def served(up_run: PtyRun, home: Path) -> Iterator[str]:
    """tritonserver on up's repository (for bench), started in-process."""
    from toolchain.triton import server as S

    srv = S.start(
        _repo(home),
        ports=S.Ports(S.free_port(), S.free_port(), S.free_port()),
        log_path=home / "bench-server.log",
        ready_timeout=540,
    )
    try:
        yield srv.grpc_url
    finally:
        srv.stop()


def test_bench_on_a_terminal(served: str, home: Path) -> None:
    r = run_on_pty(
        [TOOLCHAIN, "bench", "--url", served, "--repo", str(_repo(home)), "--concurrency", "1,2", "--requests", "4"],
        env=_env(home),
        timeout=600,
    )
    _ok(r)
    assert "TTFT" in r.text or "ttft" in r.text, r.describe()


def test_serve_then_ctrl_c_on_a_terminal(up_run: PtyRun, home: Path) -> None:
    from toolchain.triton.server import free_port

    ports = [str(free_port()) for _ in range(3)]
    r = run_on_pty(
        [
            TOOLCHAIN,
            "serve",
            str(_repo(home)),
            "--http-port",
            ports[0],
            "--grpc-port",
            ports[1],
            "--metrics-port",
            ports[2],
            "--ready-timeout",
            "540",  # a loaded 2-core machine takes minutes to load four Python models
        ],
        env=_env(home),
        timeout=600,
        interrupt_when=lambda out: b"ready: HTTP" in out,
        interrupt_after=0.5,
    )
    _ok(r)
    assert "ready: HTTP" in r.text and "stopped" in r.text, r.describe()
    assert "stopping tritonserver" in r.text  # Ctrl-C is answered at once, and the unload narrated
    stopping = r.text.split("stopping tritonserver", 1)[1]
    assert ".cc:" not in stopping, r.describe()  # in words (toolchain.triton.server.stop_states), not log lines


def test_cache_push_and_pull_of_a_large_file_on_a_terminal(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "engine"
    src.mkdir()
    with open(src / "rank0.engine", "wb") as f:  # 1.5 GiB, sparse: hashing and copying it takes a while
        f.truncate(3 * 2**29)
    (src / "config.json").write_text("{}")
    reg = tmp_path / "registry"
    push = run_on_pty([TOOLCHAIN, "cache", "push", str(src), "--registry", str(reg)], env=_env(home), timeout=600)
    _ok(push)
    keys = re.findall(r"(?m)^([0-9a-f]{64})\s*$", push.text)  # the key, on a line of its own
    assert keys, push.describe()
    full = keys[-1]
    pull = run_on_pty(
        [TOOLCHAIN, "cache", "pull", full, str(tmp_path / "restored"), "--registry", str(reg)],
        env=_env(home),
        timeout=600,
    )
    _ok(pull)
    assert (tmp_path / "restored" / "rank0.engine").stat().st_size == 3 * 2**29


def test_deploy_on_a_terminal(home: Path, tmp_path: Path) -> None:
    r = run_on_pty(
        [TOOLCHAIN, "deploy", str(SPECS / "llama-3.1-8b-fp8.yaml"), "--dry-run"],
        env=_env(home),
        timeout=300,
    )
    _ok(r)
