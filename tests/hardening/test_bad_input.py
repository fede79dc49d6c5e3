"""Hostile specs, configs and checkpoints: each is refused with one line, fast, and never crashes a command."""

from __future__ import annotations

import copy
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, Cli
from tests.hardening.fuzzing import BASE, LAUGHS

SPEC_COMMANDS = [["spec", "validate"], ["spec", "expand"], ["plan"], ["matrix", "--offline"]]


def _write(tmp_path: Path, d: dict[str, Any] | str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(d if isinstance(d, str) else yaml.safe_dump(d, allow_unicode=True), encoding="utf-8")
    return p


def _with(path: str, value: Any, base: dict[str, Any] = BASE) -> dict[str, Any]:
    d = copy.deepcopy(base)
    node = d
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return d


def _one_line_error(r: Any) -> str:
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [ln for ln in r.output.splitlines() if ln.startswith("Error: ")]
    assert lines, r.output
    return str(lines[-1])


def test_base_spec_is_valid(cli: Cli, tmp_path: Path) -> None:
    p = _write(tmp_path, BASE)
    for cmd in SPEC_COMMANDS:
        r = cli(*cmd, p)
        assert r.exit_code == 0, (cmd, r.output)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (LAUGHS, "anchors"),
        ("name: &n [*n]\n", "anchors"),
        ("a: &a\n  b: *a\n", "anchors"),
        ("a: " + "[" * 1000 + "]" * 1000 + "\n", "nested deeper"),
        ("a: " + "{b: " * 600 + "1" + "}" * 600 + "\n", "nested deeper"),
        ("name: !!binary aGVsbG8=\n", "tags"),
        ("name: !!python/object/apply:os.system [true]\n", "tags"),
        ("a: [" + "1, " * 6_000 + "1]\n", "nodes"),
    ],
)
def test_yaml_bombs_are_refused_fast(cli: Cli, tmp_path: Path, text: str, what: str) -> None:
    p = _write(tmp_path, text)
    for cmd in SPEC_COMMANDS:
        t0 = time.monotonic()
        r = cli(*cmd, p)
        # one second for the spec itself; the other commands also import their stage on first use
        assert time.monotonic() - t0 < (1.0 if cmd == ["spec", "validate"] else 2.0), cmd
        assert r.exit_code == 2
        assert what in _one_line_error(r)


NUMBERS = [float("inf"), float("-inf"), float("nan"), 1e308, 2**31, 2**63, 2**70, -(2**70)]
NUMERIC_FIELDS = [
    "matrix.max_batch_size",
    "matrix.max_seq_len",
    "matrix.max_input_len",
    "matrix.tp",
    "build.max_num_tokens",
    "serving.kv_cache_free_gpu_mem_fraction",
    "serving.max_tokens_in_paged_kv_cache",
    "serving.max_queue_delay_us",
    "serving.max_queue_size",
    "serving.cuda_graphs.batch_sizes",
    "serving.cuda_graphs.cache_size",
    "slo.tpot_ms.p99",
    "traffic.peak_rps",
    "traffic.burst_headroom",
    "traffic.input_tokens.mean",
    "traffic.output_tokens.std",
    "quantization.accuracy.max_rel_logit_error",
    "quantization.accuracy.max_ppl_increase",
]


@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_numbers_beyond_what_the_target_accepts_are_refused(cli: Cli, tmp_path: Path, field: str) -> None:
    for value in NUMBERS:
        v: Any = [value] if field.startswith("matrix.") or field.endswith("batch_sizes") else value
        if isinstance(value, float) and v != [value] and value != value:  # nan as a scalar
            v = value
        p = _write(tmp_path, _with(field, v))
        for cmd in (["spec", "validate"], ["plan"]):
            r = cli(*cmd, p)
            assert r.exit_code == 2, (field, value, cmd, r.output)
            _one_line_error(r)


def test_denormal_and_tiny_rates_do_not_crash_plan(cli: Cli, tmp_path: Path) -> None:
    for value in (5e-324, 1e-300):
        r = cli("plan", _write(tmp_path, _with("traffic.peak_rps", value)))
        assert r.exit_code == 2, r.output
        _one_line_error(r)


def test_plan_and_matrix_apply_the_compatibility_rules(cli: Cli, tmp_path: Path) -> None:
    d = _with("matrix.max_input_len", [8192])  # > max_seq_len 4096
    p = _write(tmp_path, d)
    for cmd in [*SPEC_COMMANDS, ["build", "--all", "--dry-run"], ["deploy", "--dry-run"]]:
        r = cli(*cmd, p)
        assert r.exit_code == 2, (cmd, r.output)
        assert "max_input_len 8192 exceeds max_seq_len 4096" in _one_line_error(r)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "fuzz\n"),
        ("target.trtllm_version", "1.1.0\n"),
        ("target.tensorrt_version", "１０.13.3"),
        ("target.trtllm_version", "1.１.0"),
        ("model.source", "hf://org/model@main\n"),
        ("model.source", "hf://org/mödel"),
    ],
)
def test_patterns_are_anchored_and_ascii(cli: Cli, tmp_path: Path, field: str, value: str) -> None:
    r = cli("spec", "validate", _write(tmp_path, _with(field, value)))
    assert r.exit_code == 2, r.output
    assert "\n" not in _one_line_error(r)[:-1]


def test_matrix_size_is_capped_with_a_clear_error(cli: Cli, tmp_path: Path) -> None:
    d = _with("matrix.max_batch_size", list(range(1, 65)))
    d = _with("matrix.max_seq_len", list(range(4096, 4096 + 64)), d)
    d = _with("matrix.max_input_len", list(range(1, 65)), d)
    t0 = time.monotonic()
    r = cli("spec", "validate", _write(tmp_path, d))
    assert time.monotonic() - t0 < 1.0
    assert r.exit_code == 2 and "the limit is 10,000" in _one_line_error(r)
    t0 = time.monotonic()
    d = {**BASE, "matrix": {k: list(range(1, 201)) for k in ("max_batch_size", "max_seq_len", "max_input_len")}}
    d["matrix"]["gpu"] = ["H100-SXM"]
    r = cli("spec", "validate", _write(tmp_path, d))  # 200 values per axis: 8 million cells, refused before expansion
    assert time.monotonic() - t0 < 1.0
    assert r.exit_code == 2 and "the limit is 10,000" in _one_line_error(r)
    r = cli("spec", "validate", _write(tmp_path, _with("matrix.max_batch_size", list(range(1, 301)))))
    assert r.exit_code == 2 and "at most 256" in _one_line_error(r)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model.source", "a" * 300),
        ("model.source", "x/" * 3000),
        ("model.source", "a\x00b"),
        ("description", "nul \x00 inside"),
        ("matrix.gpu", ["H100-SXM\x00"]),
        ("name", "n" * 300),
        ("target.container", "c" * 1000),
    ],
)
def test_long_and_odd_strings_are_one_line_errors(cli: Cli, tmp_path: Path, field: str, value: Any) -> None:
    p = _write(tmp_path, _with(field, value))
    for cmd in SPEC_COMMANDS:
        r = cli(*cmd, p)
        assert r.exit_code == 2, (cmd, r.output)
        line = _one_line_error(r)
        assert len(line) < 600 and "\x00" not in line


def test_odd_spec_paths_are_one_line_errors(cli: Cli, tmp_path: Path) -> None:
    for p in [tmp_path / ("n" * 300 + ".yaml"), tmp_path / "x\nnewline.yaml", tmp_path]:
        r = cli("spec", "validate", str(p))
        assert r.exit_code == 2
        _one_line_error(r)


# --- checkpoints ------------------------------------------------------------------------------------------

GOOD_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
}


def _safetensors(header: dict[str, Any]) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def _checkpoint(tmp_path: Path, config: bytes | dict[str, Any], weights: bytes | None) -> Path:
    ck = tmp_path / "ckpt"
    ck.mkdir(exist_ok=True)
    (ck / "config.json").write_bytes(config if isinstance(config, bytes) else json.dumps(config).encode())
    for f in ck.glob("*.safetensors"):
        f.unlink()
    if weights is not None:
        (ck / "model.safetensors").write_bytes(weights)
    return ck


VALID_WEIGHTS = _safetensors({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}) + b"\0" * 8
BROKEN = [
    ("garbage config", b"\x89PNG\r\n\x1a\n\x00\x00", VALID_WEIGHTS),
    ("list config", b"[1, 2]", VALID_WEIGHTS),
    ("deep config", b"[" * 100_000 + b"]" * 100_000, VALID_WEIGHTS),
    ("hidden true", {**GOOD_CONFIG, "hidden_size": True}, VALID_WEIGHTS),
    ("intermediate 0", {**GOOD_CONFIG, "intermediate_size": 0}, VALID_WEIGHTS),
    ("intermediate -5", {**GOOD_CONFIG, "intermediate_size": -5}, VALID_WEIGHTS),
    ("kv -1", {**GOOD_CONFIG, "num_key_value_heads": -1}, VALID_WEIGHTS),
    ("hidden not divisible", {**GOOD_CONFIG, "hidden_size": 130}, VALID_WEIGHTS),
    ("layers float", {**GOOD_CONFIG, "num_hidden_layers": 2.5}, VALID_WEIGHTS),
    ("vocab huge", {**GOOD_CONFIG, "vocab_size": 10**30}, VALID_WEIGHTS),
    ("empty safetensors", GOOD_CONFIG, b""),
    ("truncated safetensors", GOOD_CONFIG, VALID_WEIGHTS[:20]),
    ("binary safetensors", GOOD_CONFIG, struct.pack("<Q", 16) + b"\xff" * 16),
    ("shapeless safetensors", GOOD_CONFIG, _safetensors({"w": {"dtype": "BF16"}})),
    ("list header", GOOD_CONFIG, _safetensors([1, 2])),  # type: ignore[arg-type]
    ("bad shape", GOOD_CONFIG, _safetensors({"w": {"dtype": "BF16", "shape": ["a"], "data_offsets": [0, 0]}})),
]


@pytest.mark.parametrize(("what", "config", "weights"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_checkpoints_are_refused_by_plan(cli: Cli, tmp_path: Path, what: str, config: Any, weights: Any) -> None:
    ck = _checkpoint(tmp_path, config, weights)
    d = _with("model.source", str(ck))
    d["model"].pop("architecture")
    d["quantization"] = {"weights": "bf16", "kv_cache": "auto"}
    r = cli("plan", _write(tmp_path, d))
    assert r.exit_code == 2, (what, r.output)
    _one_line_error(r)


@pytest.mark.parametrize(("what", "config", "weights"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_checkpoints_are_refused_by_quantize(
    cli: Cli, tmp_path: Path, what: str, config: Any, weights: Any
) -> None:
    ck = _checkpoint(tmp_path, config, weights)
    r = cli("quantize", "--checkpoint", ck, "--weights", "fp8", "--out", tmp_path / "out")
    assert r.exit_code == 2, (what, r.output)
    _one_line_error(r)
    assert not (tmp_path / "out").exists()


def test_binary_calibration_file_is_refused(tmp_path: Path) -> None:
    from toolchain.errors import UserInputError
    from toolchain.quantize.calib import load_texts

    for name, data in (("c.txt", b"\xff\xfe\x00bin"), ("c.jsonl", b"\x00\x01\x02"), ("d.jsonl", b"[" * 100_000)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UserInputError):
            load_texts(name, tmp_path, 0, 4)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_plan_of_a_hub_spec_fails_fast(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    d = copy.deepcopy(BASE)
    d["model"].pop("architecture")
    t0 = time.monotonic()
    r = cli("plan", _write(tmp_path, d))
    assert time.monotonic() - t0 < 6
    assert r.exit_code == 2
    assert "is not reachable" in _one_line_error(r)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = cli("plan", _write(tmp_path, d))
    assert r.exit_code == 2 and "HF_HUB_OFFLINE" in _one_line_error(r)


# --- serve, bench report, diagnose on garbage -------------------------------------------------------------


@pytest.fixture
def html_server() -> Any:
    """A local HTTP server that answers every path with an HTML page (not Prometheus text)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>not metrics</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()
    srv.server_close()


def test_diagnose_refuses_file_urls_and_non_prometheus_bodies(cli: Cli, html_server: str, tmp_path: Path) -> None:
    (tmp_path / "m.txt").write_text("nv_inference_request_success 1\n")
    for url in (f"file://{tmp_path / 'm.txt'}", "ftp://127.0.0.1/x", "http://[::1", "garbage", html_server):
        r = cli("diagnose", "--metrics-url", url, "--samples", "1")
        assert r.exit_code != 0, (url, r.output)
        assert "no findings" not in r.output
        _one_line_error(r)


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)),
        b"",
        b"[1, 2]",
        b"[" * 100_000,
        json.dumps({"kind": "toolchain.bench-result", "runs": "x"}).encode(),
        json.dumps(
            {"kind": "toolchain.bench-result", "runs": [{"label": "c=1", "summary": {"completed": "x"}}]}
        ).encode(),
        json.dumps({"kind": "toolchain.bench-result", "runs": [{"label": 1}]}).encode(),
    ],
)
def test_bench_report_and_diagnose_refuse_damaged_results(cli: Cli, tmp_path: Path, content: bytes) -> None:
    (tmp_path / "r.json").write_bytes(content)
    for args in (
        ["bench", "report", tmp_path / "r.json", "--out", tmp_path / "rep"],
        ["diagnose", "--bench", tmp_path / "r.json"],
        ["plan", REPO / "engine_specs" / "tiny.yaml", "--measured", tmp_path / "r.json"],
    ):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        _one_line_error(r)
    assert not (tmp_path / "rep" / "report.md").exists()


@pytest.mark.parametrize("meta", [b"\x00\xff binary", b"[1]", b'{"engine": 5}', b'{"engine": {"world_size": 1e9}}'])
def test_serve_refuses_a_damaged_repository_marker(cli: Cli, tmp_path: Path, meta: bytes) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "toolchain-repo.json").write_bytes(meta)
    r = cli("serve", repo, "--http-port", "1", "--grpc-port", "2", "--metrics-port", "3")
    assert r.exit_code == 2, r.output
    _one_line_error(r)
    r = cli("serve", repo, "--http-port", "70000")
    assert r.exit_code == 2 and "Traceback" not in r.output
