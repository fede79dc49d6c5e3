"""`toolchain --help` stays light: no torch, ModelOpt, transformers, tritonclient or pydantic-heavy work."""

from __future__ import annotations

import subprocess
import sys


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys; from toolchain.cli.main import app\n"
        "heavy = [m for m in ('torch', 'modelopt', 'transformers', 'tritonclient', 'boto3', 'numpy') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_command_has_help(cli) -> None:
    for args in (
        ["--help"],
        ["spec", "--help"],
        ["plan", "--help"],
        ["quantize", "--help"],
        ["build", "--help"],
        ["cache", "--help"],
        ["triton", "--help"],
        ["serve", "--help"],
        ["bench", "--help"],
        ["diagnose", "--help"],
        ["matrix", "--help"],
        ["up", "--help"],
        ["gpus", "--help"],
    ):
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
        assert "Usage" in r.output


def test_gpus_reports_no_gpu_cleanly(cli) -> None:
    r = cli("gpus", "--json")
    assert r.exit_code == 0
    import json

    data = json.loads(r.stdout)
    assert {g["name"] for g in data["catalog"]} >= {
        "A100-40GB-SXM",
        "A100-80GB-SXM",
        "A10G",
        "L4",
        "L40S",
        "H100-SXM",
        "H100-PCIe",
        "H100-NVL",
        "H200-SXM",
        "B200",
        "GB200",
    }
    if not data["local"]:
        assert data["local_reason"]
