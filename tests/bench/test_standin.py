"""The shipped stand-in server (toolchain/bench/standin.py): the OpenAI API the bench client speaks, a fixed number of
decode slots, its name in every answer, its own tokenizer, one-line errors for its flags, a clean stop."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from toolchain.bench.standin import HEADER, SERVED_MODEL, StandIn, StandInOptions, describe, serve, write_tokenizer
from toolchain.errors import UserInputError


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_it_names_itself_in_every_answer() -> None:
    with StandIn(StandInOptions(slots=2, first_token_ms=0, token_ms=0, port=0)) as srv:
        assert srv.url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        with urllib.request.urlopen(srv.url + "/v1/models", timeout=10) as r:
            models = json.loads(r.read())
            assert r.headers[HEADER] == describe(2)
        assert models["data"][0]["id"] == SERVED_MODEL and "not an LLM" in models["data"][0]["owned_by"]
        body = {"model": SERVED_MODEL, "prompt": "baba bako", "max_tokens": 3, "stream": True}
        code, headers, raw = _post(srv.url + "/v1/completions", {**body, "stream_options": {"include_usage": True}})
        assert code == 200 and headers[HEADER] == describe(2)
        events = [json.loads(x[5:]) for x in raw.decode().split("\n") if x.startswith("data: {")]
        assert [e["model"] for e in events] == [describe(2)] * 4
        assert "".join(e["choices"][0]["text"] for e in events[:3]) == " baba bako bami"
        assert events[3]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
        code, _, raw = _post(srv.url + "/v1/chat/completions", {**body, "stream": False, "messages": []})
        assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == " baba bako bami"
        code, _, raw = _post(srv.url + "/v1/completions", {**body, "model": "llama"})
        assert code == 404 and f"serves {SERVED_MODEL!r}" in json.loads(raw)["error"]["message"]


def test_requests_beyond_the_slots_wait_for_one() -> None:
    with StandIn(StandInOptions(slots=2, first_token_ms=0, token_ms=20, port=0)) as srv:
        body = {"model": SERVED_MODEL, "prompt": "x", "max_tokens": 5, "stream": True}
        threads = [threading.Thread(target=_post, args=(srv.url + "/v1/completions", body)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert srv.counters.served == 6 and srv.counters.busy_max == 2 and srv.counters.busy == 0


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_is_counted_before_its_answer_ends(monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    """Measured before: the count came after the answer's last byte, so a client that had its whole answer could
    read the count without it (the test above, and `bench stand-in`'s closing line after a Ctrl-C, "0 requests
    served" for a request answered in full). Here the count itself is slow, as a handler thread descheduled at
    that point is: the client, with its whole answer, must still find it counted, at once and without polling."""
    from toolchain.bench import standin

    class SlowToCount(standin.Counters):
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "served" and value:
                time.sleep(0.5)
            super().__setattr__(name, value)

    monkeypatch.setattr(standin, "Counters", SlowToCount)
    with StandIn(StandInOptions(slots=1, first_token_ms=0, token_ms=0, port=0)) as srv:
        body = {"model": SERVED_MODEL, "prompt": "x", "max_tokens": 2, "stream": stream}
        for n in (1, 2):
            code, _, raw = _post(srv.url + "/v1/completions", body)
            assert code == 200 and (b"[DONE]" in raw if stream else json.loads(raw)["choices"])
            assert srv.counters.served == n and srv.counters.busy == 0


@pytest.mark.slow  # imports transformers
def test_its_tokenizer_counts_one_token_per_word(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from toolchain.bench.workload import PromptMaker

    tok = AutoTokenizer.from_pretrained(write_tokenizer(tmp_path / "tok"))
    assert len(tok.encode("baba kora", add_special_tokens=False)) == 2
    pm = PromptMaker(tok, 0)
    assert pm.count(pm.make(8)) == 8 == len(pm.make(8).split())  # the stand-in's own count agrees with bench's


def test_serve_says_ready_and_stops_cleanly(tmp_path: Path) -> None:
    said: list[str] = []
    stop = threading.Event()
    stop.set()  # already asked to stop: it starts, says so, and stops
    served = serve(StandInOptions(slots=3, port=0), stop=stop, say=said.append, tokenizer_out=tmp_path / "tok")
    assert served == 0 and (tmp_path / "tok" / "tokenizer.json").is_file()
    assert said[0].startswith(f"ready: {describe(3)} at http://127.0.0.1:") and "Ctrl-C stops it" in said[0]
    assert said[-1] == "stand-in stopped: 0 requests served"


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [({"slots": 0}, "--slots must be at least 1"), ({"token_ms": -1}, "--token-ms"), ({"port": 70000}, "--port")],
)
def test_bad_flags_are_one_line_errors(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(UserInputError, match=text):
        StandInOptions(**kwargs)


def test_a_port_in_use_is_a_one_line_error(cli: Cli) -> None:
    with StandIn(StandInOptions(port=0)) as srv:
        port = srv.url.rsplit(":", 1)[1]
        r = cli("bench", "stand-in", "--port", port)
    assert r.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr and "another --port" in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.slow
@pytest.mark.server
def test_ctrl_c_stops_it_cleanly(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) on the command: the closing line, exit 0, no traceback."""
    import os
    import select
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.Popen(
        [sys.executable, "-m", "toolchain.cli.main", "bench", "stand-in", "--port", "0", "--slots", "2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert select.select([proc.stderr], [], [], 60)[0], "no ready line"
        ready = proc.stderr.readline()
        assert ready.startswith(f"ready: {describe(2)} at http://127.0.0.1:"), ready
        url = ready.split(" at ", 1)[1].split(" ", 1)[0]
        code, _, _ = _post(url + "/v1/completions", {"model": SERVED_MODEL, "prompt": "x", "max_tokens": 2})
        assert code == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err.strip().splitlines()[-1] == "stand-in stopped: 1 request served" and "Traceback" not in err
    assert out == ""  # narration on stderr; the stand-in prints no data
