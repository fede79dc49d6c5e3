"""The bench result document (a record stages meet through: bench writes it; report, diagnose and `plan
--measured` read it): what `toolchain bench --save` writes and what report, diagnose and `plan
--measured` read, as pydantic models (docs/bench-result.md; JSON Schema: docs/bench-result.schema.json).

Versioning. ``schema`` is the document's version (``RESULT_SCHEMA``). A field added as optional keeps the
number; renaming, removing or retyping a field, or making one required, raises it. Readers refuse a document
whose ``schema`` is newer than theirs ("upgrade toolchain") and ignore keys they do not know within their own
version (``extra="allow"``: an unknown key is kept as it is and never checked), so a result written by a newer
toolchain of the same schema still reads. The published JSON Schema is exact for what this version writes: it
closes every object (``additionalProperties: false``), so a writer that adds a key without declaring it here
fails the schema test.

Types are strict (``strict=True``): a number field takes a JSON number only (never ``"1"`` or ``true``), a
count takes a whole number, and no number may be NaN or infinite (``allow_inf_nan=False``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolchain.errors import UserInputError

KIND = "toolchain.bench-result"
RESULT_SCHEMA = 1  # the newest result schema this toolchain writes and reads
HINT = "pass files written by `toolchain bench --save`"


class _Part(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, populate_by_name=True)


class Stats(_Part):
    """Percentiles of one metric over a load point's successful measured requests (numpy, linear interpolation)."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    count: int | None = Field(None, description="how many values the statistics are over")


class Summary(_Part):
    """The aggregate of one load point (toolchain.bench.metrics.aggregate); latencies in ms, rates per second."""

    requests: int = Field(description="measured requests sent (warm-up excluded)")
    completed: int = Field(description="requests that succeeded")
    errors: int = Field(description="requests that failed (cancelled ones excluded)")
    cancelled: int = Field(0, description="requests in flight when the run was interrupted")
    error_kinds: dict[str, int] = Field(
        default_factory=dict, description="failed requests by kind: server, connection, protocol, timeout, ..."
    )
    wall_s: float | None = Field(None, description="measured wall time of the load point, seconds")
    request_throughput_rps: float = Field(description="completed requests / wall_s")
    output_token_throughput_tps: float = Field(description="output tokens of completed requests / wall_s")
    goodput_rps: float = Field(description="completed requests that met every per-request SLO / wall_s")
    slo: dict[str, float | None] = Field(
        default_factory=dict, description="the per-request SLOs goodput counts against: ttft_ms, tpot_ms"
    )
    ttft_ms: Stats | None = Field(None, description="time to first token, ms")
    tpot_ms: Stats | None = Field(None, description="time per output token after the first, ms (AIPerf's ITL)")
    icl_ms: Stats | None = Field(None, description="gaps between streamed chunks, ms (AIPerf's ICL)")
    itl_ms: Stats | None = Field(None, description="older schema-1 results: the chunk gaps, now icl_ms")
    e2e_ms: Stats | None = Field(None, description="request sent to last chunk, ms")
    output_tokens: Stats | None = Field(None, description="output tokens per completed request")
    token_source: list[str] = Field(description="where output-token counts came from: server and/or chunks")
    definitions: dict[str, str] = Field(default_factory=dict, description="each metric's definition, in words")
    aiperf_names: dict[str, str] = Field(default_factory=dict, description="our metric key -> AIPerf's metric tag")


class Load(_Part):
    """One load point's load: a concurrency, a request rate, or a trace replayed at a speed (the load generator
    runs it; the result records it)."""

    model_config = ConfigDict(frozen=True)

    concurrency: int | None = None
    rate: float | None = Field(None, description="requests per second")
    poisson: bool = False
    duration_s: float | None = None
    trace: str | None = Field(None, description="the replayed trace's file name")
    speed: float = Field(1.0, description="trace replay speed (2 = twice as fast)")

    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        if self.trace is not None:
            return f"trace={self.trace} x{self.speed:g}"
        return f"rate={self.rate:g}/s{' poisson' if self.poisson else ''}"


class ServerWindow(_Part):
    """Server-side figures over the load point, from its Prometheus metrics (Triton's, or Dynamo's)."""

    model: str | None = None
    source: str | None = Field(None, description="'dynamo' for a Dynamo frontend; absent for Triton")
    error: str | None = Field(None, description="why the closing scrape failed (then nothing else is recorded)")
    requests_success: float | None = None
    requests_failure: float | None = None
    queue_ms_mean: float | None = None
    queue_ms_p99: float | None = None
    compute_infer_ms_mean: float | None = None
    kv_usage_max: float | None = Field(None, description="a fraction of the KV cache")
    kv_usage_mean: float | None = None
    kv_reused_blocks: float | None = None
    gpu_util_max: float | None = Field(None, description="a fraction")
    gpu_util_mean: float | None = None
    prefill_worker_requests: float | None = None
    decode_worker_requests: float | None = None
    frontend_ttft_ms_mean: float | None = None
    frontend_itl_ms_mean: float | None = None
    cached_tokens: float | None = None
    queued_requests_mean: float | None = None
    preemptions: float | None = None


class WorkerShare(_Part):
    """One load-generator process's part of a load point (``--workers N``)."""

    worker: int
    requests: int
    cpu_s: float
    wall_s: float
    clock_offset_ms: float | None = Field(None, description="the worker's clock minus the parent's, measured")
    clock_rtt_ms: float | None = Field(None, description="round trip of that clock measurement")
    clock_shifted_ms: float | None = Field(None, description="how far the worker's timestamps were shifted")


class ClientSide(_Part):
    """The load generator's own health: CPU, send lag, event-loop lag, and warnings when it was the bottleneck."""

    cpu_s: float | None = None
    cpu_ms_per_request: float | None = None
    cpu_ms_per_chunk: float | None = None
    send_lag_ms_p99: float | None = None
    late_sends: int | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    warnings: list[str] = Field(default_factory=list)
    warning: str | None = Field(None, description="the warnings joined with '; '")
    workers: list[WorkerShare] = Field(default_factory=list)


class Measured(_Part):
    """What is measured of one request, declared once: the load generator fills these fields while the request runs
    (toolchain.bench.metrics.RequestRecord, the mutable builder) and the saved ``Record`` keeps them."""

    index: int
    prompt_tokens: int
    max_tokens: int
    sent: float
    chunk_times: list[float] = Field(default_factory=list)
    output_tokens: int | None = None
    token_source: str = "server"
    error: str | None = None
    error_kind: str | None = Field(None, description="server, connection, protocol, timeout, cancelled, ...")
    scheduled: float | None = Field(None, description="when the request was due (rate mode)")
    shared_prefix: bool | None = None
    perf: dict[str, float] = Field(default_factory=dict, description="per-request counters the server returned")
    warmup: bool = False
    ended: float | None = Field(None, description="when the request ended, or was abandoned at a deadline")


class Record(Measured):
    """One request as measured (toolchain.bench.metrics.RequestRecord); times are perf_counter seconds."""

    model_config = ConfigDict(frozen=True)

    ttft_ms: float | None = None
    e2e_ms: float | None = Field(None, description="sent to last chunk; a failed or abandoned request: to its end")
    tpot_ms: float | None = None


class PrefixProof(_Part):
    """TTFT of shared-prefix against unique prompts, beside the KV blocks the server says it reused."""

    shared_requests: int = 0
    unique_requests: int = 0
    shared_ttft_ms_p50: float | None = None
    unique_ttft_ms_p50: float | None = None
    shared_reused_blocks_mean: float | None = None
    unique_reused_blocks_mean: float | None = None


class Speculative(_Part):
    """Draft acceptance over the measured requests (toolchain.bench.speculative)."""

    requests: int
    draft_tokens: int
    accepted_draft_tokens: int
    acceptance_rate: float = Field(description="accepted / drafted draft tokens")
    tokens_per_step: float | None = None


class Window(_Part):
    """Wall-clock span of the load point, Unix seconds."""

    start: float
    end: float


class ProbeVerdict(_Part):
    passed: bool
    reasons: list[str] = Field(default_factory=list)


class LoadPoint(_Part):
    """One measured load point: its summary, the server's and the client's side, and every request."""

    load: Load = Field(default_factory=Load)
    label: str = Field(description="e.g. concurrency=8, rate=2/s poisson, trace=t.jsonl x1")
    summary: Summary
    server: ServerWindow | None = None
    client: ClientSide = Field(default_factory=ClientSide)
    records: list[Record] = Field(default_factory=list)
    prefix: PrefixProof | None = None
    speculative: Speculative | None = None
    interrupted: str | None = None
    stop: str | None = Field(None, description="why the point ended early: interrupted, server-gone, stop-on-error")
    window: Window | None = None
    slo_probe: ProbeVerdict | None = Field(None, description="an SLO search's verdict on this probe")


class Workload(_Part):
    """What was sent: token distributions or a trace."""

    input_tokens: str | None = None
    output_tokens: str | None = None
    shared_prefix: str | None = None
    num_draft_tokens: int | None = None
    trace: str | None = None
    trace_requests: int | None = None
    trace_span_s: float | None = None
    trace_block_tokens: int | None = None


class Provenance(_Part):
    """Where the result came from: the deployment, the spec's cell and keys, the command and the host."""

    url: str | None = None
    model: str | None = None
    protocol: str | None = None
    stream: bool | None = None
    command: list[str] = Field(default_factory=list)
    toolchain: str | None = None
    host: str | None = None
    spec: str | None = None
    cell: str | None = None
    engine_key: str | None = None
    profile_id: str | None = None
    gpu: str | None = None
    reference: str | None = Field(None, description="set when a stand-in (the CPU reference model) served the run")
    workload: Workload = Field(default_factory=Workload)
    workers: int | None = None


class Planner(_Part):
    """The roofline planner's TPOT floor at batch 1 for the spec's cell."""

    tpot_floor_b1_ms: float = Field(description="ms per output token at batch 1: the HBM bound")
    gpu: str


class Startup(_Part):
    """How long the server took to start and to answer its first request (``toolchain up``)."""

    ready_s: float = Field(ge=0, description="from launching the server to every model ready, in seconds")
    first_request_ms: float | None = Field(None, ge=0, description="the first request's end-to-end latency")
    bundle: str = Field(description="the warm-start bundle the runtime started with: warm, cold or none (engines)")
    start: str = Field(description="what the runtime was handed, in words (warm start, cold start and why)")
    measured_on: str = Field(description="what served: TensorRT-LLM, or the CPU stand-in whose figures these are")


class SearchPlan(_Part):
    """How an SLO search probes (toolchain.bench.search.make_plan checks and fills it in): the mode, the loads it
    grows from and up to, when the bracket is narrow enough, and at most how many probes."""

    model_config = ConfigDict(frozen=True)

    mode: str = Field(description="concurrency or rate")
    start: float
    limit: float
    tolerance: float
    max_probes: int
    poisson: bool = False
    duration_s: float | None = None

    def load(self, x: float) -> Load:
        if self.mode == "concurrency":
            return Load(concurrency=int(x), duration_s=self.duration_s)
        return Load(rate=x, poisson=self.poisson, duration_s=self.duration_s)

    def close_enough(self, lo: float, hi: float) -> bool:
        """Whether the bracket [lo, hi] is within the tolerance (the search stops there)."""
        if self.mode == "concurrency":
            return hi - lo <= max(1.0, self.tolerance)
        return hi - lo <= self.tolerance * lo

    def between(self, lo: float, hi: float) -> float:
        mid = (lo + hi) / 2
        return float(math.floor(mid)) if self.mode == "concurrency" else float(f"{mid:.4g}")


class SearchSlo(_Part):
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput: float | None = Field(None, description="fraction of requests within both per-request SLOs")


class _Figures(_Part):
    phase: str | None = Field(None, description="grow or bisect")
    reasons: list[str] = Field(default_factory=list)
    ttft_ms_p99: float | None = None
    tpot_ms_p99: float | None = None
    goodput_fraction: float | None = None
    completed: int | None = None
    requests: int | None = None
    output_token_throughput_tps: float | None = None
    request_throughput_rps: float | None = None
    goodput_rps: float | None = None
    sizing: str | None = Field(
        None, description="how many requests the probe sent and why, e.g. '256 requests: 4 per stream × 64 streams'"
    )


class Probe(_Figures):
    """One probe of an SLO search: its load, verdict and the figures it was judged on."""

    load: float
    label: str
    passed: bool


class Knee(_Figures):
    """The highest probe that met the SLOs, and the lowest load that missed them."""

    load: float
    label: str | None = None
    passed: bool | None = None
    first_failing_load: float | None = None


class Search(_Part):
    """An SLO search (`bench --slo-search`): every probe in order, the curve by load, and the knee."""

    mode: Literal["concurrency", "rate"]
    plan: SearchPlan | None = None
    slo: SearchSlo | None = None
    slo_text: str | None = None
    status: str | None = Field(None, description="found, bound, probe-limit, unmet, server-gone, interrupted, stopped")
    message: str | None = None
    probes: list[Probe]
    curve: list[Probe]
    knee: Knee | None = None


class BenchResult(_Part):
    """A `toolchain bench` result (schema 1)."""

    kind: Literal["toolchain.bench-result"]
    schema_version: int = Field(
        RESULT_SCHEMA, alias="schema", ge=1, description="document version; readers refuse a newer one"
    )
    created: str | None = Field(None, description="ISO 8601, UTC")
    provenance: Provenance
    runs: list[LoadPoint] = Field(min_length=1, description="the measured load points (or search probes), in order")
    interrupted: str | None = Field(None, description="why the run stopped early, in words")
    stop: str | None = Field(None, description="interrupted, server-gone or stop-on-error when it stopped early")
    search: Search | None = None
    planner: Planner | None = None
    startup: Startup | None = None

    def document(self) -> dict[str, Any]:
        """The JSON document (what was set, unknown keys kept): what `bench --save` writes."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def build_result(doc: dict[str, Any]) -> BenchResult:
    """A writer's document as the model; a mismatch is a bug in the writer (ValueError)."""
    try:
        return BenchResult.model_validate(doc)
    except ValidationError as e:
        raise ValueError(f"the bench result being written is not schema {RESULT_SCHEMA}: {first_problem(e)}") from e


def build_point(entry: dict[str, Any]) -> LoadPoint:
    """A writer's load point as the model; a mismatch is a bug in the writer (ValueError)."""
    try:
        return LoadPoint.model_validate(entry)
    except ValidationError as e:
        raise ValueError(f"the bench result being written is not schema {RESULT_SCHEMA}: {first_problem(e)}") from e


def build_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A writer's document checked against the model (``build_result``), as the JSON document."""
    return build_result(doc).document()


def first_problem(e: ValidationError) -> str:
    """The first invalid field, in plain words: ``runs[0].summary.requests is not a whole number ('x')``."""
    err = e.errors(include_url=False)[0]
    where = _path(err["loc"])
    said = _WORDS.get(err["type"], err["msg"][:1].lower() + err["msg"][1:])
    if err["type"] == "missing":
        return f"{where} is missing" if where else "a field is missing"
    got = "" if err["type"] in ("too_short", "literal_error") else f" ({_short(err.get('input'))})"
    return f"{where or 'the document'} {said}{got}"


_WORDS = {
    "int_type": "is not a whole number",
    "int_from_float": "is not a whole number",
    "float_type": "is not a number",
    "finite_number": "is not a finite number",
    "string_type": "is not text",
    "bool_type": "is not true or false",
    "list_type": "is not a list",
    "dict_type": "is not an object",
    "model_type": "is not an object",
    "model_attributes_type": "is not an object",
    "too_short": "is empty",
    "greater_than_equal": "is below the least allowed value",
}


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part:
            out += f".{part}" if out else part
    return out


def _short(x: Any) -> str:
    text = json.dumps(x, default=str) if not isinstance(x, dict | list) else type(x).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def parse_result(data: Any, source: str) -> BenchResult:
    """A bench result from its JSON value; every problem a one-line UserInputError naming ``source``."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise UserInputError(f"{source} is not a toolchain bench result", HINT)
    version = data.get("schema", RESULT_SCHEMA)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= RESULT_SCHEMA:
        raise UserInputError(
            f"{source}: schema {version!r} is not one this toolchain reads (up to {RESULT_SCHEMA}); upgrade toolchain",
            "pip install -U the toolchain, or read the file with the toolchain that wrote it",
        )
    try:
        return BenchResult.model_validate(data)
    except ValidationError as e:
        raise UserInputError(f"{source} is a damaged toolchain bench result: {first_problem(e)}", HINT) from e


def read_result(path: Path) -> BenchResult:
    """A bench result file (`bench --save`), validated; every problem a one-line UserInputError naming the file."""
    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise UserInputError(f"cannot read bench result {path}: {e.strerror or e}", HINT) from e
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, or absurdly nested
        raise UserInputError(f"{path} is not JSON, so not a toolchain bench result", HINT) from e
    return parse_result(data, str(path))


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the result: exact for what this version writes (every object closed)."""
    schema = BenchResult.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    for d in [schema, *schema.get("$defs", {}).values()]:
        if "properties" in d:
            d["additionalProperties"] = False
    return schema
