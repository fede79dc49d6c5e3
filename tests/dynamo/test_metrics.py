"""Dynamo's metrics as bench and diagnose read them, from pages recorded off a real Dynamo 1.6.1 frontend and its
mocker workers (data/README.md): several endpoints in one --metrics-url, requests split by role."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dynamo.conftest import DATA
from toolchain.bench import dynamo_metrics, prom

ROLES = ["frontend", "prefill-0", "prefill-1", "prefill-2", "prefill-3", "decode-0", "decode-1", "decode-2"]


def _snap(tag: str) -> prom.Snapshot:
    snap = prom.Snapshot()
    for role in ROLES:
        snap.samples += prom.parse((DATA / f"metrics-{tag}-{role}.txt").read_text()).samples
    return snap


def test_three_requests_each_went_through_prefill_and_decode() -> None:
    before, after = _snap("before"), _snap("after")
    assert dynamo_metrics.is_dynamo(after)
    out = prom.server_side(before, after, [after], "tensorrt_llm", served="llama-3.3-70b")
    assert out["source"] == "dynamo"
    assert out["model"] == "llama-3.3-70b"  # the served model, not the Triton backend's name
    assert out["requests_success"] == 3 and out["requests_failure"] == 0
    assert out["prefill_worker_requests"] == 3 and out["decode_worker_requests"] == 3
    assert out["frontend_ttft_ms_mean"] > 0 and out["frontend_itl_ms_mean"] > 0
    assert 0 <= out["kv_usage_max"] <= 1
    assert out["queue_ms_mean"] >= 0 and out["preemptions"] == 0


def test_triton_pages_are_not_taken_for_dynamo() -> None:
    page = prom.parse('nv_inference_request_success{model="tensorrt_llm",version="1"} 4\n')
    assert not dynamo_metrics.is_dynamo(page)
    assert prom.server_side(prom.Snapshot(), page, [], "tensorrt_llm")["requests_success"] == 4


@pytest.fixture
def two_endpoints() -> Iterator[list[str]]:
    pages = {
        "/a": (DATA / "metrics-after-frontend.txt").read_bytes(),
        "/b": (DATA / "metrics-after-decode-0.txt").read_bytes(),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages[self.path]
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    yield [f"http://127.0.0.1:{port}/a", f"http://127.0.0.1:{port}/b"]
    srv.shutdown()


def test_metrics_url_takes_several_endpoints(two_endpoints: list[str], tmp_path: Path) -> None:
    merged = prom.scrape(",".join(two_endpoints))
    names = {s.name for s in merged.samples}
    assert any(n.startswith("dynamo_frontend_") for n in names) and "trtllm:kv_cache_usage_perc" in names
    one = prom.scrape(two_endpoints[0])
    assert len(merged.samples) > len(one.samples)
