"""The watchdog between `toolchain serve` and tritonserver reports the server's own exit status, even when
the server exits between its two waits (measured before: a crash collected by the orphan reaper was
reported as exit 0, so `serve` exited 0 after tritonserver died)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO

# Runs the watchdog in a child interpreter whose first wait on the server sees it still running, then
# sleeps until the server has exited: the orphan reaper is the one that collects it.
RACE = textwrap.dedent(
    """
    import os, sys, time
    from toolchain.triton import watchdog

    real = os.waitpid
    first = {"done": False}

    def waitpid(pid, options):
        if pid > 0 and not first["done"]:
            first["done"] = True
            time.sleep(1.0)  # the server exits meanwhile
            return 0, 0
        return real(pid, options)

    os.waitpid = waitpid
    sys.exit(watchdog.main(["--parent", str(os.getppid()), "--", sys.executable, "-c", "raise SystemExit(3)"]))
    """
)


def _run(code: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # its own session, as `serve` starts it: the watchdog stops its whole process group at the end
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=60, start_new_session=True).returncode


def test_a_server_collected_by_the_reaper_keeps_its_exit_code() -> None:
    assert _run(RACE) == 3


def test_exit_codes_pass_through() -> None:
    for rc in (0, 3):
        code = (
            "import os, sys\nfrom toolchain.triton import watchdog\n"
            "sys.exit(watchdog.main(['--parent', str(os.getppid()), '--', sys.executable, '-c',"
            f" 'raise SystemExit({rc})']))"
        )
        assert _run(code) == rc
