"""The progress interface: the CLI renderer (bars on a terminal, throttled lines otherwise) and Heartbeat."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers import BlockingTarget, bench_requests
from toolchain.progress import Heartbeat, Progress, prefixed


def test_lines_off_a_terminal_are_throttled_and_bytes_get_rate_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    from toolchain.cli.render import Stages

    st = Stages(every=0.3, tty=False)
    st("pulling")
    for i in range(1, 11):
        st("pull", i * 1e6, 10e6, unit="B")
        time.sleep(0.06)
    lines = capsys.readouterr().err.splitlines()
    assert "pulling" in lines[0]
    pull = [ln for ln in lines if "pull:" in ln]
    assert 2 <= len(pull) < 10  # throttled, not one line per update
    assert "10.00 MB / 10.00 MB (100%)" in pull[-1]  # completion always gets a line
    assert "MB/s" in pull[1] and "ETA" in pull[1]


def test_open_ended_work_shows_elapsed_and_the_latest_message(capsys: pytest.CaptureFixture[str]) -> None:
    from toolchain.cli.render import Stages

    st = Stages(every=0.0, tty=False)
    st("trtllm-build", 12.0, None, unit="s", message="[TRT] Building layer 3/40 [x]")
    out = capsys.readouterr().err
    assert "trtllm-build: 12 s elapsed — [TRT] Building layer 3/40 [x]" in out  # markup in logs printed as is


def test_heartbeat_reports_every_interval_with_the_probe() -> None:
    seen: list[tuple[str, float | None, str | None]] = []

    def progress(stage, done=None, total=None, *, unit="", message=None):  # type: ignore[no-untyped-def]
        seen.append((stage, done, message))

    box = ["starting"]
    with Heartbeat(prefixed(progress, "  "), "server", lambda: box[0], every=0.05):
        time.sleep(0.2)
        box[0] = "ensemble READY"
        time.sleep(0.2)
    assert len(seen) >= 4 and seen[0][0] == "  server"
    assert seen[-1][2] == "ensemble READY" and seen[-1][1] is not None and seen[-1][1] >= 0.3


def test_bench_reports_every_finished_request() -> None:
    from toolchain.bench.loadgen import _run
    from toolchain.bench.result import Load

    seen: list[tuple[str, float | None, float | None]] = []

    def progress(stage, done=None, total=None, *, unit="", message=None):  # type: ignore[no-untyped-def]
        seen.append((stage, done, total))

    asyncio.run(_run(BlockingTarget(0.0), bench_requests(6), Load(concurrency=2), 1, 0, False, 3, {}, progress))
    assert [d for _, d, _ in seen] == [1, 2, 3, 4, 5] and {t for _, _, t in seen} == {5}
    assert seen[0][0] == "concurrency=2 requests"


def test_terminal_bars_render_and_close(capsys: pytest.CaptureFixture[str]) -> None:
    from toolchain.cli.render import Stages

    st = Stages(tty=True)
    st("downloading")
    for i in range(1, 5):
        st("pull abc", i * 1e6, 4e6, unit="B")
    st("trtllm-build", 3.0, None, unit="s", message="[TRT] layer 7")
    st("done")  # narration closes the bars
    st.close()
    err = capsys.readouterr().err
    assert "downloading" in err and "pull abc" in err and "done" in err


def _recorder() -> tuple[list[tuple[str, float | None, float | None, str | None]], Progress]:
    seen: list[tuple[str, float | None, float | None, str | None]] = []

    def progress(
        stage: str, done: float | None = None, total: float | None = None, *, unit: str = "", message: str | None = None
    ) -> None:
        seen.append((stage, done, total, message))

    return seen, progress


@pytest.mark.parametrize(("raised", "said"), [(KeyboardInterrupt, "interrupted"), (RuntimeError, "failed")])
def test_a_wait_that_ends_by_an_exception_never_says_done(raised: type[BaseException], said: str) -> None:
    """Issue 49: Ctrl-C in `up` printed "loading models: done in 8 s — ... LOADING", then "Interrupted"."""
    seen, progress = _recorder()
    with pytest.raises(raised), Heartbeat(progress, "waiting", lambda: "model LOADING", every=0.02):
        time.sleep(0.1)
        raise raised()
    finished = [s for s in seen if s[1] is not None and s[2] is not None and s[1] >= s[2]]
    assert finished == [], seen  # nothing a renderer draws as "done in N s"
    assert seen[-1][0].startswith(f"waiting: {said} after ") and seen[-1][1] is None, seen


def test_an_interrupted_tritonserver_load_wait_says_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (KeyboardInterrupt) inside `toolchain.triton.server.start`'s load wait: the wait's last line says
    "interrupted", never "done", and the server is stopped."""
    import subprocess

    from toolchain.triton import server as S

    procs: list[subprocess.Popen[bytes]] = []

    def launch(cmd: list[str], log_path: Path, env: dict[str, str], shm_prefix: str = "") -> subprocess.Popen[bytes]:
        log_path.write_text("loading\n")
        procs.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
        return procs[-1]

    calls = [0]

    def ready(url: str) -> bool:
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return False

    monkeypatch.setattr(S, "_launch", launch)
    monkeypatch.setattr(S, "_pytriton_command", lambda *a, **k: ["tritonserver"])
    monkeypatch.setattr(S, "CONTAINER_TRITON", tmp_path / "absent")
    monkeypatch.setattr(S, "_is_ready", ready)
    monkeypatch.setattr(S, "model_states", lambda *a, **k: "postprocessing LOADING")
    (tmp_path / "repo").mkdir()
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    seen, progress = _recorder()
    with pytest.raises(KeyboardInterrupt):
        S.start(tmp_path / "repo", ports=ports, log_path=tmp_path / "server.log", progress=progress)
    loading = [s for s in seen if s[0].startswith("tritonserver loading models")]
    assert not [s for s in loading if s[1] is not None and s[2] is not None and s[1] >= s[2]], loading
    assert any(s[0].startswith("tritonserver loading models: interrupted after") for s in loading), seen
    assert procs and procs[0].poll() is not None  # stopped, not left running
