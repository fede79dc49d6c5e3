"""The rule table: one row per diagnosis rule, read by `toolchain diagnose` and by the alerts `toolchain deploy`
writes (a PrometheusRule), so the CLI and the pager can never disagree.

Rows are in the cookbook's order (docs/diagnose.md): the queue first, then the KV cache, then prefill
interference, then GPU health; request errors and the prefix cache last. Each row carries its threshold,
severity, what makes it fire, the evidence, the action, and the PromQL that evaluates it on a Prometheus
server (None where the server exports no metric for it: TPOT quantiles are measured by the client only).

The PromQL is written over the recording rules in ``SIGNALS`` (``toolchain:*``), which aggregate Triton's
series by ``namespace`` and ``service`` (the labels a ServiceMonitor scrape adds). ``$SEL`` stands for the
deployment's label matchers (``namespace="...",service="..."``) and ``$MODEL`` for those plus the model's
(``model="tensorrt_llm"``); ``toolchain.deploy.observability`` fills them in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

QUEUE_MS = 200.0  # queue time above which requests wait for capacity
KV_FRACTION = 0.8  # KV-cache block usage above which requests risk preemption
KV_CRITICAL = 0.95
TTFT_RATIO = 5.0  # TTFT P99/P50 spread that means long prefills stall the batch
TPOT_RATIO = 3.0
GPU_UTIL = 0.7  # GPU utilisation below which the GPU waits on scheduling at peak
PEAK_BATCH_FILL = 0.8  # server-side "at peak": in-flight requests >= this share of the batch limit
ERROR_RATIO = 0.01  # failed share of requests

WINDOW = "5m"  # the rate window of the quantile and ratio recording rules


@dataclass(frozen=True)
class Signal:
    """A recording rule: ``record`` is the series name, ``expr`` its PromQL (with ``$SEL`` / ``$MODEL``)."""

    record: str
    expr: str
    unit: str
    help: str


# Triton's model-level series carry model/version; the ServiceMonitor adds namespace, service, pod, job.
_BY = "by (namespace, service)"
SIGNALS: tuple[Signal, ...] = (
    Signal(
        "toolchain:queue_ms:p99",
        f'max {_BY} (nv_inference_queue_summary_us{{$MODEL,quantile="0.99"}}) / 1000',
        "ms",
        "worst pod's queue-time P99 (Triton summary, --metrics-config summary_latencies=true)",
    ),
    Signal(
        "toolchain:queue_ms:mean",
        f"sum {_BY} (rate(nv_inference_queue_duration_us{{$MODEL}}[{WINDOW}])) / "
        f"sum {_BY} (rate(nv_inference_request_success{{$MODEL}}[{WINDOW}])) / 1000",
        "ms",
        "mean queue time per request (Triton's cumulative counters)",
    ),
    Signal(
        "toolchain:queue_ms:diagnose",
        "toolchain:queue_ms:p99{$SEL} or toolchain:queue_ms:mean{$SEL}",
        "ms",
        "the queue time the rules read: the P99 where the server exports it, else the mean (as diagnose does)",
    ),
    *(
        Signal(
            f"toolchain:ttft_ms:p{q}",
            f"histogram_quantile(0.{q}, sum by (namespace, service, le) "
            f"(rate(nv_inference_first_response_histogram_ms_bucket{{$MODEL}}[{WINDOW}])))",
            "ms",
            f"time to first response P{q} (Triton histogram, --metrics-config histogram_latencies=true)",
        )
        for q in ("50", "90", "99")
    ),
    Signal(
        "toolchain:tpot_ms:iteration_mean",
        f'avg {_BY} (1000 / (rate(nv_trt_llm_general_metrics{{$MODEL,general_type="iteration_counter"}}'
        f"[{WINDOW}]) > 0))",
        "ms",
        "mean time per engine iteration, the server-side estimate of TPOT (one token per decoding request per "
        "iteration; idle time inside the window counts)",
    ),
    Signal(
        "toolchain:kv_usage:max",
        f'max {_BY} (max_over_time(nv_trt_llm_kv_cache_block_metrics{{$MODEL,kv_cache_block_type="fraction"}}'
        f"[{WINDOW}]))",
        "ratio",
        "peak KV-cache block usage over the window, worst pod",
    ),
    Signal(
        "toolchain:gpu_util:mean",
        f"avg {_BY} (nv_gpu_utilization{{$SEL}})",
        "ratio",
        "mean GPU utilisation over the deployment's GPUs (Triton's nv_gpu_utilization)",
    ),
    Signal(
        "toolchain:batch_fill:ratio",
        f'sum {_BY} (nv_trt_llm_request_metrics{{$MODEL,request_type="active"}}) / '
        f'sum {_BY} (nv_trt_llm_request_metrics{{$MODEL,request_type="max"}})',
        "ratio",
        "in-flight requests over the batch limit (the backend's active and max request counts)",
    ),
    Signal(
        "toolchain:requests:rate5m",
        f"sum {_BY} (rate(nv_inference_request_success{{$MODEL}}[{WINDOW}]))",
        "1/s",
        "successful requests per second",
    ),
    Signal(
        "toolchain:errors:ratio_rate5m",
        f"sum {_BY} (rate(nv_inference_request_failure{{$MODEL}}[{WINDOW}])) / "
        f"(sum {_BY} (rate(nv_inference_request_failure{{$MODEL}}[{WINDOW}])) + "
        f"sum {_BY} (rate(nv_inference_request_success{{$MODEL}}[{WINDOW}])))",
        "ratio",
        "failed share of requests",
    ),
    Signal(
        "toolchain:kv_reused_blocks:increase1h",
        f'sum {_BY} (max_over_time(nv_trt_llm_kv_cache_block_metrics{{$MODEL,kv_cache_block_type="reused"}}[1h])'
        f' - min_over_time(nv_trt_llm_kv_cache_block_metrics{{$MODEL,kv_cache_block_type="reused"}}[1h]))',
        "blocks",
        "KV blocks reused from the prefix cache in the last hour (the backend's cumulative reused count)",
    ),
    Signal(
        "toolchain:requests:increase1h",
        f"sum {_BY} (increase(nv_inference_request_success{{$MODEL}}[1h]))",
        "requests",
        "successful requests in the last hour",
    ),
)


@dataclass(frozen=True)
class Rule:
    name: str  # the finding's rule id, e.g. "undersized"
    alert: str  # the Prometheus alert name
    step: str  # cookbook step: queue | kv-cache | prefill-interference | gpu-health | errors | prefix-cache
    severity: str  # critical | warning | info
    threshold: float
    fires_when: str
    why: str
    evidence: str  # the alert's description (Prometheus template: {{ $value }} is the expression's value)
    action: str
    expr: str | None  # PromQL over SIGNALS; None: no server-side metric, bench results only
    for_: str = "5m"
    critical_above: float | None = None  # above this value the finding is critical
    critical_expr: str | None = None  # the critical alert's PromQL (same alert name; Alertmanager inhibits the warning)
    needs: str = ""  # what the server must export for the expression

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["for"] = d.pop("for_")
        return d


RULES: tuple[Rule, ...] = (
    Rule(
        name="undersized",
        alert="LLMQueueTimeHigh",
        step="queue",
        severity="critical",
        threshold=QUEUE_MS,
        fires_when=f"queue time (P99, else mean) > {QUEUE_MS:g} ms",
        why="requests wait for a slot: too little capacity for the load",
        evidence='queue time is {{ $value | printf "%.0f" }} ms (> ' + f"{QUEUE_MS:g} ms)",
        action="add GPUs/instances (see `toolchain plan` fleet size) or lower admitted load",
        expr=f"toolchain:queue_ms:diagnose{{$SEL}} > {QUEUE_MS:g}",
        needs="nv_inference_queue_summary_us (summary_latencies=true) or the queue-duration counters",
    ),
    Rule(
        name="kv-preemption-risk",
        alert="LLMKVCacheNearlyFull",
        step="kv-cache",
        severity="warning",
        threshold=KV_FRACTION,
        critical_above=KV_CRITICAL,
        fires_when=f"peak KV-cache block usage > {KV_FRACTION:.0%} (critical above {KV_CRITICAL:.0%})",
        why="a full KV cache forces the scheduler to pause or evict requests",
        evidence="KV-cache usage peaked at {{ $value | humanizePercentage }} (> " + f"{KV_FRACTION:.0%})",
        action="reduce max_seq_len or max batch, raise kv_cache_free_gpu_mem_fraction, or add GPUs",
        expr=f"toolchain:kv_usage:max{{$SEL}} > {KV_FRACTION:g}",
        critical_expr=f"toolchain:kv_usage:max{{$SEL}} > {KV_CRITICAL:g}",
        needs="nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction} (tensorrtllm backend)",
    ),
    Rule(
        name="prefill-decode-interference",
        alert="LLMPrefillInterference",
        step="prefill-interference",
        severity="warning",
        threshold=TTFT_RATIO,
        fires_when=f"TTFT P99/P50 > {TTFT_RATIO:g} while queue time < {QUEUE_MS:g} ms",
        why="requests are admitted quickly but long prompts' prefill steps stall the batch they join",
        evidence='TTFT P99/P50 = {{ $value | printf "%.1f" }} (> '
        + f"{TTFT_RATIO:g}) while requests queue < {QUEUE_MS:g} ms: long prefills stall the batch, not a "
        "capacity shortage",
        action="enable chunked prefill (serving.enable_chunked_prefill); at scale consider disaggregated "
        "prefill/decode",
        expr=f"(toolchain:ttft_ms:p99{{$SEL}} / (toolchain:ttft_ms:p50{{$SEL}} > 0) > {TTFT_RATIO:g}) "
        f"and on (namespace, service) (toolchain:queue_ms:diagnose{{$SEL}} < {QUEUE_MS:g})",
        needs="nv_inference_first_response_histogram_ms (histogram_latencies=true, decoupled model)",
    ),
    Rule(
        name="prefill-spikes",
        alert="LLMPrefillSpikes",
        step="prefill-interference",
        severity="warning",
        threshold=TPOT_RATIO,
        fires_when=f"TPOT P99/P50 > {TPOT_RATIO:g}",
        why="decode steps that share an iteration with a prefill are slow",
        evidence=f"TPOT P99/P50 > {TPOT_RATIO:g}",
        action="enable chunked prefill and cap max_num_tokens so decode steps are not stalled",
        expr=None,
        needs="per-token latency quantiles, which only the client measures (`toolchain bench`)",
    ),
    Rule(
        name="gpu-underutilised",
        alert="LLMGPUUnderutilised",
        step="gpu-health",
        severity="warning",
        threshold=GPU_UTIL,
        fires_when=f"mean GPU utilisation < {GPU_UTIL:.0%} at peak load (server side: in-flight requests "
        f">= {PEAK_BATCH_FILL:.0%} of the batch limit)",
        why="the GPU waits on scheduling or admission, not on work",
        evidence="GPU utilisation is {{ $value | humanizePercentage }} with the batch at least "
        + f"{PEAK_BATCH_FILL:.0%} full (< {GPU_UTIL:.0%})",
        action="check scheduling and admission: scheduler policy, max_queue_delay, instance count, client concurrency",
        expr=f"(toolchain:gpu_util:mean{{$SEL}} < {GPU_UTIL:g}) "
        f"and on (namespace, service) (toolchain:batch_fill:ratio{{$SEL}} >= {PEAK_BATCH_FILL:g})",
        for_="10m",
        needs="nv_gpu_utilization (Triton GPU metrics) and nv_trt_llm_request_metrics",
    ),
    Rule(
        name="request-errors",
        alert="LLMRequestErrors",
        step="errors",
        severity="critical",
        threshold=ERROR_RATIO,
        fires_when=f"failed requests > {ERROR_RATIO:.0%} of all requests",
        why="the server rejects or fails requests (inputs, cancellation, backend errors)",
        evidence="{{ $value | humanizePercentage }} of requests failed (> " + f"{ERROR_RATIO:.0%})",
        action="read the server log and nv_inference_request_failure's reason label (REJECTED, CANCELED, BACKEND)",
        expr=f"toolchain:errors:ratio_rate5m{{$SEL}} > {ERROR_RATIO:g}",
        needs="nv_inference_request_failure and nv_inference_request_success",
    ),
    Rule(
        name="prefix-cache-unused",
        alert="LLMPrefixCacheUnused",
        step="prefix-cache",
        severity="info",
        threshold=0.0,
        fires_when="prefix caching is configured, the workload shared prefixes, and the server reused 0 blocks "
        "(server side: none in an hour of traffic)",
        why="reuse needs paged context FMHA and prefixes of at least tokens_per_block tokens",
        evidence="prefix caching is configured but the server reused 0 KV blocks in the last hour of traffic",
        action="check the engine has paged context FMHA, prompts share >= tokens_per_block leading tokens, and "
        "enable_kv_cache_reuse is true",
        expr="(toolchain:kv_reused_blocks:increase1h{$SEL} == 0) "
        "and on (namespace, service) (toolchain:requests:increase1h{$SEL} > 0)",
        for_="15m",
        needs="nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=reused}",
    ),
)

BY_NAME = {r.name: r for r in RULES}


def table_json() -> dict[str, Any]:
    """The table as data (`toolchain diagnose --rules --json`)."""
    return {
        "rules": [r.to_json() for r in RULES],
        "signals": [asdict(s) for s in SIGNALS],
    }
