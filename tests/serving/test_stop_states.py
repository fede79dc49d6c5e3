"""What `serve` and `up` show while tritonserver shuts down: its progress read from its own log lines, not the
raw last line of its log (on main the bar showed 'I1203 ... server.cc:345] "Timeout 28: Found 3 live ...').

The log is tests/reference/tritonserver_2.51_shutdown.log, written by a real tritonserver 2.51 on SIGTERM."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO

LOG = (REPO / "tests" / "reference" / "tritonserver_2.51_shutdown.log").read_text().splitlines()
RECORDED = [ln for ln in LOG if not ln.startswith("#")]


def _upto(tmp_path: Path, marker: str) -> Path:
    """The log as it stood just after the first line holding ``marker`` was written."""
    i = next(n for n, ln in enumerate(RECORDED) if marker in ln)
    p = tmp_path / "tritonserver.log"
    p.write_text("\n".join(RECORDED[: i + 1]) + "\n")
    return p


def test_the_shutdown_reads_as_models_unloaded_and_left(tmp_path: Path) -> None:
    from toolchain.triton.server import stop_states

    assert stop_states(_upto(tmp_path, "Signal (15)")) == "waiting for its shutdown to begin"
    assert stop_states(_upto(tmp_path, "in-flight inferences")) == "waiting for in-flight requests"
    assert stop_states(_upto(tmp_path, "Found 6 live")) == "6 models live"
    assert stop_states(_upto(tmp_path, "Found 3 live")) == "3 of 6 unloaded (last tensorrt_llm)"
    assert stop_states(_upto(tmp_path, "Found 0 live")) == "all 6 models unloaded"
    # short enough to stay whole beside the bar at 80 columns: "stopping tritonserver: 12 s — " + 13 for the bar
    states = [stop_states(_upto(tmp_path, m)) for m in ("Signal (15)", "Found 6", "Found 3", "Found 0")]
    assert all(s is not None and len(s) <= 80 - 13 - len("stopping tritonserver: 12 s — ") for s in states), states
    for state in map(stop_states, [_upto(tmp_path, m) for m in ("Found 6", "Found 3", "Found 0")]):
        assert state is not None and "cc:" not in state and "I1203" not in state  # never a raw log line
