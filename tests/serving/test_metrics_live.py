"""A live scrape of the CPU Triton (2.51, the CPU reference model) while requests stream: the latency metrics
the toolchain turns on are there, and every metric the alerts and the dashboard name that this server can
produce is exported under that name and label value. The names it cannot produce (GPU, the C++ backend's
iteration and token counters, the 2.52+ first-response histogram) are checked against the upstream reference
lists in tests/deploy/test_observability.py."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import wait_for
from toolchain.artifacts.rule_table import RULES, SIGNALS
from toolchain.bench import prom
from toolchain.deploy.observability import RuleTable, Scope, Slo, dashboard, rule_groups
from toolchain.triton import server as S
from toolchain.triton.client import stream_generate

pytestmark = [pytest.mark.slow, pytest.mark.server]
# what the CPU reference model and Triton 2.51 cannot export: the first-response histogram arrived in 2.52,
# GPU metrics need a GPU, the rest are the C++ tensorrtllm backend's (the CPU model publishes only KV and requests)
NOT_ON_CPU = re.compile(
    r"^(nv_inference_first_response_histogram_ms.*|nv_gpu_.*|DCGM_.*|nv_trt_llm_general_metrics|nv_llm_output_token_len.*"
    r"|up)$"
)


@pytest.fixture(scope="module")
def served(reference_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S.Server]:
    ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
    srv = S.start(reference_repo, ports=ports, log_path=tmp_path_factory.mktemp("log") / "t.log", ready_timeout=420)
    yield srv
    srv.stop()


def _named(exprs: list[str]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """(metric, its label matchers other than the deployment's) for every raw selector in ``exprs``."""
    out = set()
    for name, sel in re.findall(r"\b([a-zA-Z_][a-zA-Z0-9_:]*)\{([^}]*)\}", "\n".join(exprs)):
        if name.startswith("toolchain:"):
            continue
        labels = dict(re.findall(r'([a-zA-Z_]+)=~?"([^"]*)"', sel))
        extra = tuple(
            sorted(
                (k, v)
                for k, v in labels.items()
                if k not in ("namespace", "service", "pod", "exported_pod", "exported_namespace", "model")
            )
        )
        out.add((name, extra))
    return out


def test_live_scrape_exports_every_metric_the_rules_and_dashboard_name(served: S.Server) -> None:
    scope = Scope("app", "llm")
    groups = rule_groups(RuleTable(RULES, SIGNALS), scope, [Slo("ttft", 99, 500.0), Slo("tpot", 99, 30.0)])
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    exprs += [
        t["expr"]
        for p in dashboard(RuleTable(RULES, SIGNALS), scope, [], 2.0, title="t")["panels"]
        for t in p["targets"]
    ]
    before = prom.scrape(served.metrics_url)
    # a small bench: concurrent streams through the ensemble, with a scrape in the middle of them
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(stream_generate(served.grpc_url, "ensemble", "Hello there", 6)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    during = prom.scrape(served.metrics_url)
    for t in threads:
        t.join(120)
    assert len(results) == 4
    # Triton counts a decoupled request as done after its last response has gone out: a scrape at once can still
    # lack some of the four (measured: requests_success 1.0 in a full run), so scrape until they are all counted
    scraped: list[str] = []

    def counted() -> bool:
        scraped.append(urllib.request.urlopen(served.metrics_url, timeout=5).read().decode())
        return bool(prom.server_side(before, prom.parse(scraped[-1]), [], "tensorrt_llm")["requests_success"] >= 4)

    wait_for(counted, 60, every=0.2)
    after = prom.parse(scraped[-1])
    # the summaries --metrics-config summary_latencies=true turns on: the queue P99 the undersized rule reads
    assert after.value("nv_inference_queue_summary_us", model="tensorrt_llm", quantile="0.99") is not None
    side = prom.server_side(before, after, [during, after], "tensorrt_llm")
    assert side["queue_ms_p99"] >= 0 and side["requests_success"] >= 4
    # every family and label value the rules and panels name, exported by this server
    missing = []
    for name, extra in sorted(_named(exprs)):
        if NOT_ON_CPU.match(name):
            continue
        samples = [
            s for s in after.samples if s.name == name and s.labels.get("model", "tensorrt_llm") == "tensorrt_llm"
        ]
        ok = [s for s in samples if all(re.fullmatch(v, s.labels.get(k, "")) for k, v in extra)]
        if not ok:
            missing.append(f"{name}{dict(extra)}")
    assert not missing, f"named in a rule or panel but not exported by the CPU Triton: {missing}"
