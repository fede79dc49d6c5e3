"""Set-up shows progress: while pip installs for minutes, scripts/heartbeat.sh says on stderr what it waits on
and for how long (issue: about 163 s of silence after 'installing into .venv'), and stops with the step or with
the script."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.conftest import REPO

HEARTBEAT = REPO / "scripts" / "heartbeat.sh"


def _bash(script: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", f". {HEARTBEAT}\n{script}"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )


def test_a_long_step_says_what_it_waits_on_until_it_ends() -> None:
    p = _bash(
        'heartbeat_start "installing into .venv"; sleep 3.5; heartbeat_stop; sleep 2; echo done >&2',
        SETUP_PROGRESS_EVERY="1",
    )
    _, err = p.communicate(timeout=60)
    lines = err.splitlines()
    beats = [x for x in lines if x.startswith("setup: installing into .venv: ")]
    assert len(beats) >= 2 and beats[0].endswith("s so far"), lines
    assert lines[-1] == "done" and lines.index("done") == len(beats)  # nothing after the step ended


def test_the_beat_dies_with_a_killed_script() -> None:
    p = _bash('heartbeat_start "installing"; sleep 600', SETUP_PROGRESS_EVERY="1")
    try:
        time.sleep(1.5)
        os.kill(p.pid, signal.SIGKILL)  # the script only: the beat (a bash subshell) must see its parent go
        p.wait(timeout=30)
        deadline = time.monotonic() + 30  # a ceiling many times the beat's period
        while True:
            beats = subprocess.run(["pgrep", "-s", str(p.pid), "bash"], capture_output=True, text=True).stdout
            if not beats.strip() or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert beats.strip() == "", "the heartbeat outlived the script it reported on"
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the orphaned `sleep 600`


def test_every_setup_script_beats_around_its_installs() -> None:
    for name in ("setup.sh", "setup-dynamo.sh", "setup-aic.sh"):
        text = (REPO / "scripts" / name).read_text()
        assert text.count("heartbeat_start") >= 1 and text.count("heartbeat_start") == text.count("heartbeat_stop"), (
            name
        )
