"""Options: one meaning per name across commands, and every closed set a choice the parser enforces."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import options as O
from toolchain.cli.main import command_tree


def _options() -> dict[str, list[tuple[str, Any]]]:
    """Option name -> (command path, option) for every command (typer carries its own click: duck-typed)."""
    found: dict[str, list[tuple[str, Any]]] = {}

    def walk(cmd: Any, path: str) -> None:
        for p in cmd.params:
            if p.param_type_name == "option":
                for name in p.opts:
                    found.setdefault(name, []).append((path, p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(command_tree(), "")
    return found


def test_closed_sets_match_the_library() -> None:
    from toolchain.bench.setup import PROTOCOLS
    from toolchain.deploy import FRONTENDS
    from toolchain.pipeline.matrix import FORMATS as MATRIX_FORMATS
    from toolchain.planning.estimate import ESTIMATORS
    from toolchain.quantize.run import DEVICE_MAPS, DEVICES, FORMATS, GATES, KV_FORMATS

    pairs: list[tuple[type[Any], tuple[str, ...]]] = [
        (O.WeightFormat, FORMATS),
        (O.KVCacheFormat, KV_FORMATS),
        (O.Device, DEVICES),
        (O.DeviceMap, DEVICE_MAPS),
        (O.AccuracyGate, GATES),
        (O.BenchProtocol, PROTOCOLS),
        (O.Frontend, FRONTENDS),
        (O.MatrixFormat, MATRIX_FORMATS),
        (O.Estimator, ESTIMATORS),
    ]
    for enum, values in pairs:
        assert {e.value for e in enum} == set(values), enum.__name__


def test_shared_option_names_mean_one_thing() -> None:
    opts = _options()
    meaning = {
        "--out": "Directory to write",
        "--model": "Name of the served model",
        "--timeout": "Seconds before",
        "--registry": "Registry URL",
        "--cell": "One matrix cell id",
    }
    for name, prefix in meaning.items():
        for where, opt in opts[name]:
            assert (opt.help or "").startswith(prefix), f"`toolchain {where} {name}` means something else: {opt.help}"
    # names that are kept for one meaning only
    assert {w for w, _ in opts["--format"]} == {"matrix"}
    assert {w for w, _ in opts["--dataset"]} == {"bench"}
    assert {w for w, _ in opts["--samples"]} == {"diagnose"}


def test_every_closed_set_is_a_choice() -> None:
    opts = _options()
    for name in (
        "--protocol",
        "--format",
        "--weights",
        "--kv-cache",
        "--device",
        "--device-map",
        "--gate",
        "--frontend",
        "--estimator",
    ):
        for where, opt in opts[name]:
            annotation = opt.type_descriptor.annotation
            assert isinstance(annotation, type) and issubclass(annotation, Enum), (
                f"`toolchain {where} {name}` accepts any string"
            )


def test_an_unknown_protocol_is_refused(cli: Any) -> None:
    r = cli("bench", "--url", "127.0.0.1:1", "--protocol", "grpc", "--tokenizer", "x")
    assert r.exit_code == 2 and "'grpc' is not one of" in r.output


def test_the_library_refuses_an_unknown_protocol_too() -> None:
    from tests.bench.workloads import bench_args
    from toolchain.bench.options import BenchOptions
    from toolchain.errors import UserInputError

    with pytest.raises(UserInputError, match="unknown protocol 'grpc'"):
        BenchOptions(**bench_args(protocol="grpc", requests=1, timeout=1.0))


def test_engine_names_an_engine_in_every_command(cli: Any, tmp_path: Path) -> None:
    """--engine is a registry reference (or, where the engine is local, a directory) everywhere; the CPU reference
    model is --reference in `triton emit` as in `deploy`, never an --engine value."""
    from tests.conftest import SPECS

    spec = SPECS / "tiny.yaml"
    cases = [
        (["--engine", "reference"], "pass --reference"),
        ([], "--engine KEY|DIR, or --reference"),
        (["--engine", "0" * 64, "--reference"], "exactly one"),
    ]
    for i, (args, want) in enumerate(cases):
        r = cli("triton", "emit", spec, "--out", tmp_path / f"r{i}", *args)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and want in lines[0], r.output
        assert not (tmp_path / f"r{i}").exists()
