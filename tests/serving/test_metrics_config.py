"""The latency metrics every Triton the toolchain starts exports: tritonserver's flags, and the OpenAI frontend's
in-process server given the same settings by the launcher (run here on a stand-in ``tritonserver`` module that
records what it was given, since the container's Python bindings are not installed on this machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from toolchain.triton import server as S
from toolchain.triton.metrics_config import METRICS_CONFIG, metrics_args

FAKE_TRITONSERVER = """
import json, os
class Server:
    def __init__(self, options=None, **kwargs):
        self.kwargs = kwargs
    def start(self, wait_until_ready=False):
        with open(os.environ["RECORD"], "w") as f:
            json.dump({"kwargs": self.kwargs, "cls": type(self).__name__}, f)
        return self
"""
# the shape of triton-inference-server/server python/openai/openai_frontend/main.py (v2.64.0): it imports a sibling
# package and starts tritonserver.Server(model_repository=..., ...) with no metrics setting of its own
FAKE_MAIN = """
import argparse
import tritonserver
from engine import NAME

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-repository")
    args = p.parse_args()
    tritonserver.Server(model_repository=args.model_repository, log_info=True).start(wait_until_ready=True)
    print("started", NAME)

if __name__ == "__main__":
    main()
"""


def test_tritonserver_gets_the_latency_metrics_flags() -> None:
    args = S._net_args("127.0.0.1", S.Ports(1, 2, 3))
    assert "--metrics-config=summary_latencies=true" in args
    assert "--metrics-config=histogram_latencies=true" in args
    assert metrics_args() == [a for a in args if a.startswith("--metrics-config=")]


def test_the_openai_frontend_launcher_passes_the_settings_to_the_in_process_server(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tritonserver.py").write_text(FAKE_TRITONSERVER)
    front = tmp_path / "openai_frontend"
    (front / "engine").mkdir(parents=True)
    (front / "engine" / "__init__.py").write_text("NAME = 'engine'\n")
    (front / "main.py").write_text(FAKE_MAIN)
    record = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), os.environ.get("PYTHONPATH", "")])}
    env["RECORD"] = str(record)
    r = subprocess.run(
        [sys.executable, "-m", "toolchain.triton.metrics_config", str(front / "main.py"), "--model-repository", "/m"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "started engine" in r.stdout  # the frontend's sibling packages import
    got = json.loads(record.read_text())["kwargs"]
    assert got["model_repository"] == "/m" and got["log_info"] is True
    assert got["metrics_configuration"] == {"": dict(METRICS_CONFIG)}


def test_the_launcher_refuses_what_is_not_a_script() -> None:
    r = subprocess.run([sys.executable, "-m", "toolchain.triton.metrics_config"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_the_entrypoint_starts_every_frontend_with_the_metrics() -> None:
    text = (Path(S.__file__).parents[1] / "deploy" / "entrypoint.sh").read_text()
    assert '"$PY" -m toolchain.triton.metrics_config "$OPENAI_MAIN"' in text
    for flag in metrics_args():
        assert flag in text  # the multi-rank tritonserver of the kserve frontend
