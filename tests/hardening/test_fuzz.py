"""Fuzz every command that reads a spec, and every command's arguments, through the real CLI.

Properties, for every run: no traceback, no hang, an exit code docs/cli.md documents, a one-line
``Error:`` on failure, and a bounded answer time. Each test has a fixed time budget (see
``fuzzing.budget``); the tally is printed so a longer run (``TOOLCHAIN_FUZZ_SECONDS=600``) reports
how many runs it made.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.hardening.fuzzing import BASE, LAUGHS, Tally, budget, check, hang_limit, invoke
from tests.helpers import GOOD_CONFIG, safetensors_bytes, whole_bench_result

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DROP = "<drop this key>"  # a mutation that removes the key instead of setting it

HOSTILE: list[Any] = [
    float("inf"),
    float("-inf"),
    float("nan"),
    1e308,
    5e-324,
    -1,
    0,
    2**31,
    2**63,
    2**70,
    -(2**70),
    True,
    None,
    "",
    "x" * 300,
    "a\x00b",
    "1.1.0\n",
    "１.１.０",
    "h100-sxm\n",
    "Ｈ100",
    [],
    {},
    [1] * 50,
    list(range(1, 300)),
    {"a": {"b": {"c": 1}}},
    "hf://org/model\n",
    "hf://" + "a" * 300 + "/b",
    "../" * 40 + "etc",
    # input classes of issue 23: subnormals (a float and YAML's string spelling), a line break or tab ending a
    # path, a sequence length with no room for output, a removed key (max_input_len: its default then applies)
    1e-320,
    -1e-310,
    "1e-320",
    "./ckpt\n",
    "/models/llama\t",
    [1],
    [1, 2],
    DROP,
]

# Text attacks on the YAML layer itself: aliases, recursion, deep nesting, tags, huge scalars.
TEXT_ATTACKS = [
    LAUGHS,
    "name: &n [*n]\n",
    "&a [*a]\n",
    "a: " + "[" * 1000 + "]" * 1000 + "\n",
    "a: " + "{b: " * 600 + "1" + "}" * 600 + "\n",
    "!!python/object/apply:os.system ['true']\n",
    "name: !!binary aGVsbG8=\n",
    "name: " + "9" * 5000 + "\n",
    "? [a, b]\n: c\n",
    "name: fuzz\nname: fuzz\n",
    "\ufeffname: x\n",
    'name: "\\0"\n',
]


def _paths(d: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(BASE) if p]


def _mutate(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(base)
    node: Any = d
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return d


mutation = st.tuples(st.sampled_from(PATHS), st.sampled_from(HOSTILE) | st.integers() | st.floats() | st.text())
spec_text = st.one_of(
    st.lists(mutation, min_size=1, max_size=3).map(
        lambda ms: yaml.safe_dump(_apply(ms), allow_unicode=True, sort_keys=False)
    ),
    st.sampled_from(TEXT_ATTACKS),
    st.tuples(st.sampled_from(TEXT_ATTACKS), st.just(yaml.safe_dump(BASE, sort_keys=False))).map(
        lambda t: t[1] + t[0].replace("a:", "description:", 1) if t[0].startswith("a:") else t[1]
    ),
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
)


def _apply(ms: list[tuple[tuple[Any, ...], Any]]) -> dict[str, Any]:
    d = BASE
    for path, value in ms:
        try:
            d = _mutate(d, path, value)
        except (KeyError, IndexError, TypeError):
            continue
    return d


# Examples per hypothesis run; runs repeat (each with new random choices) until the time budget is spent.
BATCH = 20

SPEC_COMMANDS: list[list[str]] = [
    ["spec", "validate"],
    ["spec", "expand"],
    ["plan", "--estimator", "floor"],  # the spec text is fuzzed here, not the AIConfigurator subprocess
    ["matrix", "--offline", "--format", "json"],
    ["build", "--all", "--dry-run"],
    ["deploy", "--dry-run"],
]


def test_fuzz_spec_text(tmp_path: Path) -> None:
    """Every spec command on fuzzed spec text; validate's verdict binds every other command."""
    tally = Tally()
    deadline = time.monotonic() + budget(20)
    spec = tmp_path / "fuzz.yaml"

    @settings(max_examples=BATCH, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(spec_text)
    def run(text: str) -> None:
        if time.monotonic() > deadline:
            return
        spec.write_text(text, encoding="utf-8", errors="surrogateescape")
        verdict = None
        for cmd in SPEC_COMMANDS:
            o = invoke([*cmd, str(spec)], limit=hang_limit(20))
            check(tally, o, slow_s=15)  # a generous ceiling: a hang is the property, not speed
            if cmd == ["spec", "validate"]:
                verdict = o.exit_code
                if o.seconds > 8.0:  # well under a second of work; the ceiling leaves room for a loaded CI machine
                    tally.problems.append(f"validate took {o.seconds:.2f} s: {text[:80]!r}")
            elif verdict not in (0, None) and o.exit_code == 0:
                tally.problems.append(f"validate refused but `{' '.join(cmd)}` accepted: {text[:200]!r}")

    while time.monotonic() < deadline:  # fresh random batches until the budget is spent
        run()
    print(tally.line("spec text"))
    assert not tally.problems, "\n".join(tally.problems[:20])


# --- every command's arguments --------------------------------------------------------------------------


@pytest.fixture
def garbage(tmp_path: Path) -> dict[str, str]:
    """Hostile files and directories the argument fuzzer picks from."""
    g = tmp_path / "g"
    g.mkdir()
    (g / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (g / "empty.json").write_bytes(b"")
    (g / "list.json").write_text("[1, 2, 3]")
    (g / "nul.json").write_bytes(b'{"kind": "toolchain.bench-result\x00"}')
    (g / "fake-result.json").write_text(json.dumps({"kind": "toolchain.bench-result", "runs": "x"}))
    (g / "half-result.json").write_text(json.dumps({"kind": "toolchain.bench-result", "runs": [{"label": 1}]}))
    (g / "prom.txt").write_text("<html>hello</html>\n")
    (g / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": -5}\n[]\n')
    search = {"mode": "rate", "probes": [{"load": "x", "passed": 1}], "curve": "y", "knee": {"load": None}}
    (g / "search-result.json").write_text(
        json.dumps({"kind": "toolchain.bench-result", "runs": [{"label": "c=1", "summary": {}}], "search": search})
    )
    ckpt = g / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"hidden_size": true, "num_attention_heads": -1}')
    (ckpt / "model.safetensors").write_bytes(b"\xff" * 7)
    repo = g / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_bytes(b"\x00\x01garbage {{{")
    odd = g / "odd"
    odd.mkdir()
    (odd / "a\\b.bin").write_bytes(b"x")
    (odd / "new\nline.bin").write_bytes(b"y")
    (odd / ("n" * 250)).write_bytes(b"z")
    (g / "runner.yaml").write_text("h100-sxm: [1, 2]\n")
    # issue 23: checkpoints whose header or config parse but do not describe the model, a bench result that lost
    # summary.requests, and specs pointing at those checkpoints or ending a path in a line break
    weights = safetensors_bytes({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
    for name, cfg, data in (
        ("ckpt-cut", GOOD_CONFIG, weights + b"\0" * 5),
        ("ckpt-long", GOOD_CONFIG, weights + b"\0" * 12),
        ("ckpt-heads", {**GOOD_CONFIG, "hidden_size": 130, "head_dim": 32}, weights + b"\0" * 8),
        ("ckpt-pos0", {**GOOD_CONFIG, "max_position_embeddings": 0}, weights + b"\0" * 8),
    ):
        (g / name).mkdir()
        (g / name / "config.json").write_text(json.dumps(cfg))
        (g / name / "model.safetensors").write_bytes(data)
        spec = {**BASE, "name": name, "model": {"source": str(g / name)}}
        (g / f"spec-{name}.yaml").write_text(yaml.safe_dump(spec))
    (g / "spec-newline.yaml").write_text(yaml.safe_dump({**BASE, "model": {"source": str(g / "ckpt-cut") + "\n"}}))
    no_requests = whole_bench_result()
    del no_requests["runs"][0]["summary"]["requests"]
    (g / "no-requests-result.json").write_text(json.dumps(no_requests))
    return {p.name: str(p) for p in g.iterdir()} | {"missing": str(g / "nope"), "dir": str(g), "out": str(g / "o")}


def _argv_strategy(files: dict[str, str]) -> st.SearchStrategy[list[str]]:
    f = st.sampled_from(sorted(files.values()))
    s = st.sampled_from(
        ["", "x" * 300, "a\x01b", "-1", "0", "1e309", "nan", "inf", "18446744073709551617", "１２", "abc\n", "🙂"]
    ) | st.text(max_size=20).filter(lambda t: "\x00" not in t)
    n = st.sampled_from(["-1", "0", "1", "65536", "99999999999999999999", "nan", "1e308", "x"])
    url = st.sampled_from(
        [
            "file:///etc/passwd",
            "http://127.0.0.1:1/metrics",
            "http://[::1",
            "ftp://127.0.0.1/x",
            "garbage",
            "",
            "http://127.0.0.1:1/" + "a" * 300,
            "s3://",
            "hf://x",
            "127.0.0.1:1",
        ]
    )
    key = st.sampled_from(["0" * 64, "0" * 64 + "\n", "0" * 63, "ZZ", "../x", "a" * 300, "0" * 8]) | s
    reg = st.sampled_from([files["dir"] + "/reg", "s3://", "hf://a", "ftp://x", files["binary.bin"], "x\x01"])
    cmds = [
        st.tuples(st.just("spec"), st.sampled_from(["validate", "expand"]), f),
        st.tuples(st.just("plan"), f, st.just("--cell"), s),
        st.tuples(st.just("matrix"), f, st.just("--offline"), st.just("--format"), s),
        st.tuples(st.just("matrix"), st.just(files["missing"]), st.just("--offline"), st.just("--runner-map"), f),
        st.tuples(st.just("cache"), st.just("show"), key, st.just("--registry"), reg),
        st.tuples(st.just("cache"), st.just("pull"), key, f, st.just("--registry"), reg),
        st.tuples(st.just("cache"), st.just("push"), f, st.just("--key"), key, st.just("--registry"), reg),
        st.tuples(st.just("cache"), st.just("tag"), key, s, st.just("--registry"), reg),
        st.tuples(st.just("cache"), st.sampled_from(["ls", "verify"]), st.just("--registry"), reg),
        st.tuples(st.just("cache"), st.just("gc"), st.just("--dry-run"), st.just("--registry"), reg),
        st.tuples(st.just("triton"), st.just("lint"), f),
        st.tuples(st.just("triton"), st.just("emit"), f, st.just("--engine"), s, st.just("--out"), f),
        st.tuples(st.just("serve"), f, st.just("--http-port"), n, st.just("--ready-timeout"), n),
        st.tuples(st.just("bench"), st.just("report"), f, st.just("--out"), f),
        st.tuples(st.just("plan"), f, st.just("--measured"), f),
        st.tuples(
            st.just("bench"),
            st.just("--url"),
            url,
            st.just("--protocol"),
            st.just("openai"),
            st.just("--tokenizer"),
            f,
            st.just("--trace"),
            f,
            st.just("--trace-speed"),
            s,
            st.just("--workers"),
            n,
            st.just("--trace-block-tokens"),
            n,
        ),
        st.tuples(
            st.just("bench"),
            st.just("--url"),
            url,
            st.just("--tokenizer"),
            f,
            st.just("--slo-search"),
            st.sampled_from(["concurrency", "rate", "x", ""]),
            st.just("--slo-start"),
            n,
            st.just("--slo-max"),
            n,
            st.just("--slo-tolerance"),
            n,
            st.just("--slo-ttft-ms"),
            n,
            st.just("--slo-goodput"),
            n,
        ),
        st.tuples(st.just("diagnose"), st.just("--metrics-url"), url, st.just("--samples"), st.just("1")),
        st.tuples(st.just("diagnose"), st.just("--bench"), f),
        st.tuples(st.just("diagnose"), st.just("--metrics-url"), url, st.just("--samples"), n),
        st.tuples(st.just("gpus"), st.sampled_from(["--json", "--bogus"])),
        st.tuples(st.just("build"), f, st.just("--cell"), s, st.just("--dry-run"), st.just("--registry"), reg),
        st.tuples(st.just("deploy"), f, st.just("--dry-run"), st.just("--cell"), s),
        st.tuples(st.just("plan"), f, st.sampled_from(["--json", "--explain"])),
        st.tuples(
            st.just("quantize"), st.just("--checkpoint"), f, st.just("--weights"), st.just("fp8"), st.just("--out"), f
        ),
        st.tuples(
            st.sampled_from(["cache", "build"]),
            st.sampled_from(["ls", "verify", f"{files['dir']}/x.yaml"]),
            st.just("--json"),
            st.just("--registry"),
            reg,
        ),
        st.tuples(st.just("bench"), st.just("report"), st.just(files["no-requests-result.json"]), st.just("--out"), f),
        st.tuples(
            st.just("quantize"),
            st.just("--model"),
            f,
            st.just("--format"),
            s,
            st.just("--out"),
            f,
            st.just("--samples"),
            n,
        ),
    ]
    return st.one_of(*cmds).map(list)


def test_fuzz_command_arguments(garbage: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hostile files, URLs, numbers and strings for every command (no network, no server starts). They run in a
    scratch directory: a relative name such as a registry "x\x01" is created where the command runs, and on main
    that was the checkout."""
    checkout = sorted(p.name for p in REPO.iterdir())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    tally = Tally()
    deadline = time.monotonic() + budget(20)

    @settings(max_examples=BATCH, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(_argv_strategy(garbage))
    def run(argv: list[str]) -> None:
        if time.monotonic() > deadline:
            return
        check(tally, invoke(argv, limit=hang_limit(30)), slow_s=10)

    while time.monotonic() < deadline:  # fresh random batches until the budget is spent
        run()
    print(tally.line("arguments"))
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert sorted(p.name for p in REPO.iterdir()) == checkout, "a fuzzed run wrote into the checkout"
