"""`diagnose` after a bench looks at the bench's window; prefix-cache findings need a shared-prefix workload."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.conftest import Cli
from toolchain.bench.metrics import RequestRecord, aggregate
from toolchain.bench.result import BenchResult
from toolchain.diagnose.rules import diagnose, observations_from

IDLE_METRICS = (
    'nv_gpu_utilization{gpu_uuid="GPU-0"} 0.02\n'
    'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused"} 0\n'
    'nv_inference_request_success{model="tensorrt_llm",version="1"} 10\n'
)


@contextmanager
def _metrics_server(text: str) -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _result(server: dict[str, Any] | None, shared: bool | None) -> dict[str, Any]:
    recs = [
        RequestRecord(i, 8, 4, 0.0, chunk_times=[0.1, 0.12, 0.14], output_tokens=3, shared_prefix=shared)
        for i in range(10)
    ]
    prefix = None
    if shared is not None:
        prefix = {"shared_requests": 10 if shared else 0, "unique_requests": 0 if shared else 10}
    return {
        "kind": "toolchain.bench-result",
        "schema": 1,
        "provenance": {"model": "ensemble", "url": "x"},
        "runs": [
            {
                "label": "concurrency=4",
                "load": {},
                "summary": aggregate(recs, 1.0),
                "server": server,
                "client": {},
                "prefix": prefix,
                "records": [r.to_json() for r in recs],
            }
        ],
        "interrupted": None,
    }


def test_diagnose_after_a_bench_uses_the_bench_window_not_the_idle_server(cli: Cli, tmp_path: Path) -> None:
    busy = {"gpu_util_mean": 0.93, "kv_usage_max": 0.4, "queue_ms_mean": 3.0, "kv_reused_blocks": 12}
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_result(busy, shared=True)))
    with _metrics_server(IDLE_METRICS) as url:
        r = cli("diagnose", "--bench", p, "--metrics-url", url, "--samples", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["server"]["gpu_util_mean"] == 0.93
    assert "gpu-underutilised" not in [f["rule"] for f in doc["findings"]]  # the idle 2% now is not the run


def test_prefix_cache_unused_needs_a_shared_prefix_workload() -> None:
    server = {"kv_reused_blocks": 0, "queue_ms_mean": 1.0}
    no_shared = observations_from(BenchResult.model_validate(_result(server, shared=None)), None, True)
    assert [f.rule for f in diagnose(no_shared)] == []
    shared = observations_from(BenchResult.model_validate(_result(server, shared=True)), None, True)
    assert [f.rule for f in diagnose(shared)] == ["prefix-cache-unused"]
