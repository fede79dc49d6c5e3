"""Every command that writes a directory writes it through toolchain.outdir: a missing directory is created, a
non-empty one is refused without --force, --force replaces only the toolchain's own output, and a file the
toolchain did not write survives every attempt (measured before: `dynamo deploy --out DIR --force` deleted it,
`triton emit` and `bench report` overwrote without a word)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import Result

from tests.conftest import SPECS, Cli, write_tiny_spec
from toolchain.bench.metrics import RequestRecord, aggregate
from toolchain.outdir import MARKER, foreign_files


def _one_error(r: Result) -> bool:
    """Exit 2 and one line of error (progress lines aside)."""
    return r.exit_code == 2 and len([ln for ln in r.output.splitlines() if ln.startswith("Error:")]) == 1


def _one_run() -> dict[str, object]:
    recs = [
        RequestRecord(i, 8, 5, 0.0, chunk_times=[0.05 + k * 0.01 for k in range(5)], output_tokens=5) for i in range(4)
    ]
    return {
        "load": {"concurrency": 1},
        "label": "concurrency=1",
        "summary": aggregate(recs, 1.0, {"ttft_ms": 400.0, "tpot_ms": 40.0}),
        "server": None,
        "client": {},
        "prefix": None,
        "records": [r.to_json() for r in recs],
        "interrupted": None,
    }


@pytest.fixture(scope="module")
def inputs(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inputs")
    result = d / "run.json"
    result.write_text(
        json.dumps(
            {
                "kind": "toolchain.bench-result",
                "schema": 1,
                "created": "2026-11-29T12:00:00+00:00",
                "provenance": {"model": "ensemble", "url": "127.0.0.1:8001", "protocol": "triton"},
                "planner": None,
                "runs": [_one_run()],
                "interrupted": None,
                "stop": None,
            }
        )
    )
    return {"spec": write_tiny_spec(d / "tiny.yaml", tiny_checkpoint), "result": result}


def _commands(inputs: dict[str, Path]) -> dict[str, tuple[list[object], bool]]:
    """Each directory-writing command, OUT standing for the directory; and whether it takes --force."""
    spec, hub = inputs["spec"], SPECS / "llama-3.1-8b-fp8.yaml"
    return {
        "deploy": (["deploy", spec, "--registry", "s3://b/p", "--out", "OUT"], True),
        "dynamo deploy": (
            [
                "dynamo",
                "deploy",
                SPECS / "llama-3.3-70b-instruct-fp8-dynamo-disagg.yaml",
                "--out",
                "OUT",
                "--allow-unquantized",
            ],
            True,
        ),
        "triton emit": (["triton", "emit", spec, "--reference", "--out", "OUT"], True),
        "bench report": (["bench", "report", inputs["result"], "--out", "OUT"], True),
        "matrix": (
            [
                "matrix",
                hub,
                "--format",
                "kubernetes",
                "--offline",
                "--registry",
                "s3://b/p",
                "--out",
                "OUT",
                "--image",
                "registry.example.com/build@sha256:" + "0" * 64,
            ],
            True,
        ),
        "cache keygen": (["cache", "keygen", "OUT"], False),
    }


COMMANDS = ["deploy", "dynamo deploy", "triton emit", "bench report", "matrix", "cache keygen"]


@pytest.mark.parametrize("name", COMMANDS)
def test_only_the_toolchains_own_output_is_replaced(
    name: str, cli: Cli, inputs: dict[str, Path], tmp_path: Path
) -> None:
    args, takes_force = _commands(inputs)[name]
    out = tmp_path / "a" / "out"

    def run(*extra: str) -> Result:
        return cli(*(out if a == "OUT" else a for a in args), *extra)

    r = run()  # a missing directory (and its parent) is created
    assert r.exit_code == 0, r.output
    assert (out / MARKER).is_file() and foreign_files(out) == []
    own = sorted(p for p in out.rglob("*") if p.is_file() and p.name != MARKER)
    assert own, "the command wrote nothing"

    r = run()  # not empty: refused without --force, one line naming the fix
    assert _one_error(r) and "not empty" in r.output, r.output

    if takes_force:
        own[0].write_bytes(b"stale")
        r = run("--force")  # the toolchain's own output is replaced
        assert r.exit_code == 0, r.output
        assert own[0].read_bytes() != b"stale" and foreign_files(out) == []

    mine = out / "sub" / "notes.txt"  # a user's file inside the toolchain's output
    mine.parent.mkdir(exist_ok=True)
    mine.write_text("keep me")
    r = run(*(["--force"] if takes_force else []))
    assert _one_error(r), r.output
    assert mine.read_text() == "keep me" and (out / MARKER).is_file()
    if takes_force:
        assert f"did not write {mine}" in r.output

    plain = tmp_path / "users"  # a directory the toolchain never wrote
    plain.mkdir()
    (plain / "main.c").write_text("int main(void) { return 0; }\n")
    out = plain
    r = run(*(["--force"] if takes_force else []))
    assert _one_error(r), r.output
    assert (plain / "main.c").is_file() and sorted(p.name for p in plain.iterdir()) == ["main.c"]


def test_a_refusal_with_json_is_a_json_document(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "main.c").write_text("x")
    r = cli(
        "matrix", SPECS / "llama-3.1-8b-fp8.yaml", "--format", "kubernetes", "--offline", "--registry", "s3://b/p",
        "--out", out, "--image", "registry.example.com/build@sha256:" + "0" * 64, "--force", "--json",
    )  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "did not write" in json.loads(r.stdout)["error"]
    assert (out / "main.c").is_file()


def test_bytecode_python_wrote_beside_the_toolchains_files_is_its_own(cli: Cli, inputs: dict[str, Path]) -> None:
    """On a fresh clone the README's first command failed the second time it ran: Triton's Python-backend stub had
    written `tensorrt_llm/1/__pycache__/model.cpython-311.pyc` into up's repository, and the guarded writer refused
    to replace "a file the toolchain did not write". Bytecode of a file the toolchain wrote is its own; a .pyc of
    any other source, or anywhere else, is still refused."""
    import compileall

    out = inputs["spec"].parent / "emitted"
    r = cli("triton", "emit", inputs["spec"], "--reference", "--out", out)
    assert r.exit_code == 0, r.output
    models = sorted(out.rglob("model.py"))
    assert models and compileall.compile_dir(out, quiet=2)  # as the stub does when it imports model.py
    assert sorted(out.rglob("__pycache__/model.*.pyc")) and foreign_files(out) == []
    r = cli("triton", "emit", inputs["spec"], "--reference", "--out", out, "--force")
    assert r.exit_code == 0, r.output  # main: refused, naming the .pyc
    cache = models[0].parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    for stray in (cache / "other.cpython-311.pyc", out / "__pycache__" / "model.cpython-311.pyc"):
        stray.parent.mkdir(exist_ok=True)
        stray.write_bytes(b"x")
        assert stray in foreign_files(out), stray
        stray.unlink()
