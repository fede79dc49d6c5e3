"""`toolchain dynamo up` for real on 127.0.0.1: the Dynamo frontend and router with the Dynamo mocker
(stand-in for dynamo.trtllm) as prefill/decode or aggregated workers; `toolchain bench --protocol openai-chat`
through the frontend; prefill and decode on different workers; no listener off loopback; no orphan after
SIGKILL of `toolchain dynamo up`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, Cli
from tests.dynamo.conftest import DISAGG, dynamo_python_or_fail
from tests.helpers import alive, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(300)]
MODEL = "llama-3.3-70b-instruct-fp8-dynamo-disagg"


def _spec(tmp: Path, mode: str) -> Path:
    d = yaml.safe_load(DISAGG.read_text())
    if mode == "aggregated":
        d["dynamo"] = {"mode": "aggregated", "router": "round-robin", "workers": {"tp": 2, "replicas": 2}}
    else:
        d["dynamo"].update(prefill={"tp": 2, "replicas": 1}, decode={"tp": 2, "replicas": 1})
    out = tmp / f"{mode}.yaml"
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != b"Z":
                kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def descendants(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def listeners(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes hold, from /proc (like `ss -ltnp`)."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                addr_hex, port_hex = local.split(":")
                out.append((inodes[inode], _address(addr_hex), int(port_hex, 16)))
    return out


def _address(h: str) -> str:
    if len(h) == 8:  # IPv4, little-endian
        return ".".join(str(int(h[i : i + 2], 16)) for i in (6, 4, 2, 0))
    words = [h[i : i + 8] for i in range(0, 32, 8)]
    raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in raw[12:])
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))


def _loopback(addr: str) -> bool:
    return (
        addr.startswith("127.") or addr == "0000:0000:0000:0000:0000:0000:0000:0001" or addr.startswith("::ffff:127.")
    )


class Up:
    def __init__(self, proc: subprocess.Popen[bytes], info: dict[str, Any], log: Path) -> None:
        self.proc, self.info, self.log = proc, info, log

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def process(self, name: str) -> dict[str, Any]:
        return next(p for p in self.info["processes"] if p["name"] == name)


def start_up(spec: Path, workdir: Path) -> Up:
    """`toolchain dynamo up SPEC --json` as its own process; waits for its ready line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = workdir.parent / f"{workdir.name}.stderr"
    cmd = [sys.executable, "-m", "toolchain.cli.main", "dynamo", "up", str(spec), "--json", "--workdir", str(workdir)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until ready (or exit)
    if not line:
        proc.wait(10)
        raise AssertionError(f"dynamo up exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    return Up(proc, json.loads(line), log)


def stop_up(up: Up) -> None:
    tree = descendants(up.proc.pid)
    if up.proc.poll() is None:
        up.proc.send_signal(signal.SIGTERM)
        try:
            up.proc.wait(30)
        except subprocess.TimeoutExpired:
            up.proc.kill()
    for pid in tree:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def disagg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    dynamo_python_or_fail()
    tmp = tmp_path_factory.mktemp("dynamo-disagg")
    up = start_up(_spec(tmp, "disaggregated"), tmp / "run")
    try:
        yield up
    finally:
        stop_up(up)


def _bench(cli: Cli, up: Up, out: Path, *extra: object) -> dict[str, Any]:
    metrics = ",".join(up.info["metrics"])
    tok = Path(up.info["workdir"]) / "model"
    r = cli(
        "bench", "--url", up.url, "--protocol", "openai-chat", "--model", MODEL, "--tokenizer", tok,
        "--metrics-url", metrics, "--input-tokens", "256", "--output-tokens", "16", "--warmup", "1",
        "--save", out, *extra,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _served(metrics_url: str, component: str) -> float:
    from toolchain.dynamo.local import requests_served

    return requests_served(metrics_url, component)


def test_stand_in_is_named(disagg: Up) -> None:
    assert disagg.info["stand_in"] == "the Dynamo mocker (stand-in for dynamo.trtllm)"
    assert disagg.info["mode"] == "disaggregated"
    names = [p["name"] for p in disagg.info["processes"]]
    assert names == ["broker", "frontend", "prefill-0", "decode-0"]
    assert "--engine-type" in disagg.process("prefill-0")["command"]


def test_bench_streams_through_the_frontend_and_prefill_and_decode_ran_on_different_workers(
    cli: Cli, disagg: Up, tmp_path: Path
) -> None:
    pre, dec = disagg.process("prefill-0"), disagg.process("decode-0")
    assert pre["pid"] != dec["pid"]
    pre_metrics, dec_metrics = pre["metrics"], dec["metrics"]
    before = (_served(pre_metrics, "prefill"), _served(dec_metrics, "backend"))
    result = _bench(cli, disagg, tmp_path / "run.json", "--concurrency", "2", "--requests", "6")
    assert result["provenance"]["reference"] == disagg.info["stand_in"]  # the mocker named (on main: nothing)
    run = result["runs"][0]
    assert run["summary"]["completed"] == 6 and run["summary"]["errors"] == 0
    assert run["summary"]["ttft_ms"]["p50"] > 0 and run["summary"]["tpot_ms"]["p50"] > 0
    server = run["server"]
    assert server["source"] == "dynamo"
    assert server["prefill_worker_requests"] >= 6 and server["decode_worker_requests"] >= 6
    # each request's prefill on the prefill worker, its decode on the decode worker, and never the other way
    assert _served(pre_metrics, "prefill") - before[0] >= 6
    assert _served(dec_metrics, "backend") - before[1] >= 6
    assert _served(pre_metrics, "backend") == 0 and _served(dec_metrics, "prefill") == 0


def test_diagnose_reads_dynamo_metrics(cli: Cli, disagg: Up, tmp_path: Path) -> None:
    _bench(cli, disagg, tmp_path / "run.json", "--concurrency", "2", "--requests", "4")
    r = cli("diagnose", "--bench", tmp_path / "run.json", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["server"]["source"] == "dynamo" and "queue_ms_mean" in d["server"] and "kv_usage_max" in d["server"]


def test_every_listener_is_on_loopback(disagg: Up) -> None:
    pids = [disagg.proc.pid, *descendants(disagg.proc.pid)]
    found = listeners(pids)
    ports = {port for _pid, _addr, port in found}
    assert int(disagg.url.rsplit(":", 1)[1]) in ports
    assert len(found) >= 5, found  # frontend HTTP, broker XSUB + XPUB, two workers' status servers, ...
    off = [(pid, addr, port) for pid, addr, port in found if not _loopback(addr)]
    assert off == [], f"listeners off loopback: {off}"


def test_aggregated_serves_and_sigkill_of_up_leaves_no_orphan(cli: Cli, tmp_path: Path) -> None:
    dynamo_python_or_fail()
    up = start_up(_spec(tmp_path, "aggregated"), tmp_path / "run")
    try:
        assert up.info["mode"] == "aggregated"
        assert [p["name"] for p in up.info["processes"]] == ["broker", "frontend", "workers-0", "workers-1"]
        result = _bench(cli, up, tmp_path / "agg.json", "--concurrency", "2", "--requests", "4")
        server = result["runs"][0]["server"]
        assert result["runs"][0]["summary"]["completed"] == 4
        assert server["prefill_worker_requests"] == 0 and server["decode_worker_requests"] >= 4
        tree = descendants(up.proc.pid)
        assert len(tree) >= 6, tree  # a watchdog and its child per process
        os.kill(up.proc.pid, signal.SIGKILL)
        up.proc.wait(10)
        assert wait_for(lambda: not any(alive(p) for p in tree), 30), [p for p in tree if alive(p)]
    finally:
        stop_up(up)


def test_a_worker_that_dies_fails_up_with_its_name(tmp_path: Path) -> None:
    """Supervision: SIGKILL of one mocker process ends `dynamo up` with an error naming that worker and its log;
    nothing of the deployment is left behind."""
    dynamo_python_or_fail()
    up = start_up(_spec(tmp_path, "disaggregated"), tmp_path / "run")
    try:
        tree = descendants(up.proc.pid)
        watchdog = up.process("decode-0")["pid"]
        mocker = [p for p in descendants(watchdog)]
        assert mocker, "the decode worker's watchdog has a child"
        os.kill(mocker[0], signal.SIGKILL)
        assert up.proc.wait(30) != 0
        errors = [ln for ln in up.log.read_text().splitlines() if ln.startswith("Error: ")]
        assert errors and "the Dynamo mocker (stand-in for dynamo.trtllm), decode-0 exited" in errors[-1]
        assert wait_for(lambda: not any(alive(p) for p in tree), 30), [p for p in tree if alive(p)]
    finally:
        stop_up(up)
