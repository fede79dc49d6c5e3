"""The worker and frontend command lines `toolchain dynamo deploy` writes parse with Dynamo's own argument
parsers (dynamo.trtllm 1.6.1's, run in Dynamo's interpreter with tensorrt_llm stubbed for its BuildConfig
defaults), and use only flags recorded from that parser (data/trtllm_flags.json, source named inside)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.dynamo.conftest import DATA, DISAGG

STUB = """
class _F:
    def __init__(self, d):
        self.default = d


class BuildConfig:
    model_fields = {"max_batch_size": _F(2048), "max_num_tokens": _F(8192), "max_seq_len": _F(None),
                    "max_beam_width": _F(1)}
"""
PARSE = """
import argparse, json, sys
cmds = json.loads(sys.argv[1])
from dynamo.trtllm.args import parse_args
from dynamo.frontend.frontend_args import FrontendArgGroup
out = []
for name, argv in cmds:
    if name == "frontend":
        p = argparse.ArgumentParser()
        FrontendArgGroup().add_arguments(p)
        a = p.parse_args(argv)  # strict: an unknown flag exits 2
        out.append({"name": name, "router_mode": a.router_mode, "http_port": a.http_port})
    else:
        c = parse_args(argv)
        out.append({"name": name, "mode": str(c.disaggregation_mode.value), "tp": c.tensor_parallel_size,
                    "model": c.model, "extra": c.extra_engine_args, "kv_events": c.publish_kv_events})
print(json.dumps(out))
"""


def _commands(tmp: Path) -> list[tuple[str, list[str]]]:
    from toolchain.dynamo.deploy import write_dgd
    from toolchain.dynamo.pipeline import plan_spec

    planned = plan_spec(DISAGG)
    files = write_dgd(planned.cell, planned.plan, tmp / "out")
    out = []
    for line in files["commands.txt"].read_text().splitlines()[1:]:
        name, cmd = line.split(": ", 1)
        argv = shlex.split(cmd)
        assert argv[:2] == ["python3", "-m"]
        out.append((name, argv[3:]))
    return out


def test_flags_are_ones_dynamo_trtllm_accepts(tmp_path: Path) -> None:
    rec = json.loads((DATA / "trtllm_flags.json").read_text())
    assert "ai-dynamo==1.6.1" in rec["source"]
    flags = rec["flags"]
    for name, argv in _commands(tmp_path):
        if name == "frontend":
            continue
        for i, a in enumerate(argv):
            if a.startswith("--"):
                assert a in flags, f"{name}: {a} is not a dynamo.trtllm 1.6.1 flag"
                choices = flags[a]["choices"]
                if choices:
                    assert argv[i + 1] in choices, f"{name}: {a} {argv[i + 1]} not in {choices}"


@pytest.mark.slow
def test_commands_parse_with_dynamos_own_parsers(tmp_path: Path, dynamo_py: str) -> None:
    stub = tmp_path / "stub" / "tensorrt_llm"
    (stub / "llmapi").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "llmapi" / "__init__.py").write_text(STUB)
    cmds = _commands(tmp_path)
    r = subprocess.run(
        [dynamo_py, "-c", PARSE, json.dumps(cmds)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path / "stub"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = {d["name"]: d for d in json.loads(r.stdout.strip().splitlines()[-1])}
    assert got["frontend"]["router_mode"] == "kv" and got["frontend"]["http_port"] == 8000
    assert got["prefill"]["mode"] == "prefill" and got["decode"]["mode"] == "decode"
    assert got["prefill"]["tp"] == got["decode"]["tp"] == 2
    assert got["prefill"]["extra"] == "/etc/dynamo/prefill.yaml" and got["prefill"]["kv_events"] is True
    assert got["decode"]["model"] == "meta-llama/Llama-3.3-70B-Instruct"


def test_a_wrong_flag_is_caught_by_dynamos_parser(tmp_path: Path, dynamo_py: str) -> None:
    """The oracle can fail: a flag dynamo.trtllm does not have is refused by its parser."""
    stub = tmp_path / "stub" / "tensorrt_llm"
    (stub / "llmapi").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "llmapi" / "__init__.py").write_text(STUB)
    bad = [("decode", ["--model", "m", "--disaggregation-mode", "decode", "--tp-size", "2"])]
    r = subprocess.run(
        [dynamo_py, "-c", PARSE, json.dumps(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path / "stub"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert r.returncode != 0
    with pytest.raises(AssertionError):
        assert "--tp-size" in json.loads((DATA / "trtllm_flags.json").read_text())["flags"]
