"""A live display on a real pseudo-terminal stops when its stage ends: nothing redraws after the final line.

On main a rich bar started by a heartbeat (``tritonserver loading models``) kept redrawing its clock after
``ready:`` until Ctrl-C, and showed two clocks ("2 s elapsed 0:00:04"). These run a few seconds each.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.terminal.pty_harness import ANSI, run_on_pty

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from toolchain.cli.render import Stages, err
    from toolchain.progress import Heartbeat

    st = Stages()
    st("server starting")
    with Heartbeat(st, "loading models", lambda: "model READY", every=0.2):
        time.sleep(1.5)
    if sys.argv[1] == "settle":
        st.settle()
    err.print("ready: here", highlight=False)
    sys.stderr.flush()
    time.sleep(3.0)  # a server waiting for Ctrl-C: the screen must stay still
    """
)


def _run(tmp_path: Path, mode: str) -> tuple[bytes, str]:
    script = tmp_path / "live.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "80"}
    r = run_on_pty([sys.executable, str(script), mode], env=env, timeout=120)
    assert r.returncode == 0, r.describe()
    after = r.output.split(b"ready: here", 1)[1]
    return after, r.text


@pytest.mark.slow
def test_nothing_redraws_after_ready(tmp_path: Path) -> None:
    after, text = _run(tmp_path, "settle")
    assert ANSI.sub(b"", after).strip() == b"", f"redrawn after ready: {after[:300]!r}"
    assert "done in" in text.split("ready: here")[0]  # the bar became a final line


@pytest.mark.slow
def test_a_finished_heartbeat_stops_its_bar_even_without_settle(tmp_path: Path) -> None:
    after, _ = _run(tmp_path, "none")
    # no bar redraws (cursor movement, the bar's text); the "still ..." ticker may narrate the open stage
    assert b"loading models" not in after and b"\x1b[" not in after.replace(b"\x1b[2m", b"").replace(b"\x1b[0m", b""), (
        after[:300]
    )


@pytest.mark.slow
def test_one_clock_per_line(tmp_path: Path) -> None:
    _, text = _run(tmp_path, "settle")
    for line in text.splitlines():
        if "elapsed" in line or "done in" in line:
            assert not re.search(r"\d:\d\d:\d\d", line), line  # rich's TimeElapsedColumn beside our own clock


LONG = textwrap.dedent(
    """
    import sys, time
    from toolchain.cli.render import Stages
    from toolchain.progress import Heartbeat

    st = Stages()
    stage = "stopping tritonserver (unloading the models)"
    st(stage)
    states = "unloaded ensemble, postprocessing, preprocessing; tensorrt_llm and tensorrt_llm_bls still live"
    with Heartbeat(st, stage, lambda: states, every=0.2):
        time.sleep(1.5)
    time.sleep(4.0)  # silent work after the stage: the ticker may speak, but not of the stage that ended
    """
)


@pytest.mark.slow
def test_a_bar_keeps_its_stage_whole_at_80_columns_and_the_ticker_forgets_an_ended_stage(tmp_path: Path) -> None:
    """On main rich cut the stage's name ("tritonserve…") to make room for a bar and the figures, and the
    "… still importing torch" ticker went on naming an import that had ended."""
    script = tmp_path / "long.py"
    script.write_text(LONG)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "80"}
    r = run_on_pty([sys.executable, str(script)], env=env, timeout=120, cols=80)
    assert r.returncode == 0, r.describe()
    head = "stopping tritonserver (unloading the models): "
    # each redraw of the bar (frames follow each other on one line, joined by carriage returns)
    frames = re.findall(re.escape(head) + r"([^━╸╺\n]*)", r.text)
    assert frames and any("done in" in f for f in frames), r.describe()
    for info in frames:
        assert 13 + len(head) + len(info.rstrip()) <= 80, info  # the bar, the stage whole, its figures cut
    after = r.text.split("done in", 1)[1]
    assert "still stopping tritonserver" not in after, r.describe()


INTERRUPTED = textwrap.dedent(
    """
    import sys, time
    from toolchain.cli.render import Stages
    from toolchain.progress import Heartbeat

    st = Stages()
    st("tritonserver starting")
    try:
        with Heartbeat(st, "tritonserver loading models", lambda: "postprocessing LOADING", every=0.2):
            time.sleep(60)
    except KeyboardInterrupt:
        st.close()
        sys.stderr.write("Interrupted\\n")
        sys.exit(130)
    """
)


@pytest.mark.slow
def test_ctrl_c_during_a_wait_says_interrupted_not_done(tmp_path: Path) -> None:
    """Issue 49: Ctrl-C in `up` left "tritonserver loading models: done in 8 s — postprocessing LOADIN…" on the
    screen, then "Interrupted"."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "80"}
    r = run_on_pty(
        [sys.executable, str(script)],
        env=env,
        timeout=120,
        cols=80,
        interrupt_when=lambda out: b"elapsed" in out,
        interrupt_after=1.0,
    )
    assert r.returncode == 130, r.describe()
    assert "done in" not in r.text, r.describe()
    assert re.search(r"tritonserver loading models: interrupted after \d+ s", r.text), r.describe()
