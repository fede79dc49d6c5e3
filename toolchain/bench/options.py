"""What `toolchain bench` is asked to do: every flag in one frozen, validated model that owns every rule on which
values and combinations are allowed, and is also the command line.

``BenchOptions`` declares each bench flag once: a field named after the flag (``--shared-prefix`` is
``shared_prefix``), its type, default and help (the field's description). The Typer command is built from it
when the CLI starts (``toolchain.cli.model_options``), so a new flag is a field here, a rule in ``_rules`` and its
use in ``toolchain.bench.setup.make_config``; nothing else lists the flags.

It is checked when it is made, before anything slow runs (no I/O here: reading the spec, the tokenizer, the trace
or the dataset is make_config's); each mistake is a one-line UserInputError naming the flag. A field's
``json_schema_extra`` may carry ``error`` (the message of a value its type or bounds refuse, with ``{flag}`` and
``{value}``) and ``hint`` (the fix).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolchain.artifacts.bench_result import Load, SearchPlan
from toolchain.bench.slo import check_slo_flags, make_plan
from toolchain.errors import UserInputError

Protocol = Literal["triton", "openai", "openai-chat"]
PROTOCOLS: tuple[str, ...] = get_args(Protocol)
MAX_WORKERS = 256
DEFAULT_TIMEOUT_S = 300.0  # --timeout: the whole request
DEFAULT_IDLE_TIMEOUT_S = 60.0  # --idle-timeout: the longest silence (connect, first byte, between chunks)


def parse_list(text: str | None, kind: type) -> list[Any]:
    """A comma-separated list of positive numbers (``1,4,16``); empty for no text."""
    if not text:
        return []
    try:
        vals = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise UserInputError(f"cannot read the list {text!r}", "use comma-separated numbers, e.g. 1,4,16") from exc
    if any(v <= 0 for v in vals):
        raise UserInputError(f"values in {text!r} must be positive")
    return vals


def flag(name: str) -> str:
    """The command-line flag of a field: ``shared_prefix`` -> ``--shared-prefix``."""
    return "--" + name.replace("_", "-")


def _says(error: str, hint: str | None = None) -> dict[str, Any]:
    return {"error": error, "hint": hint} if hint else {"error": error}


class BenchOptions(BaseModel):
    """The bench flags: one field per flag, its description the flag's help."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    url: str = Field(
        min_length=1,
        description="Triton gRPC host:port, or http://host:port (OpenAI)",
        json_schema_extra=_says("--url is required", "e.g. --url 127.0.0.1:8001 for Triton gRPC"),
    )
    protocol: Protocol = Field(
        "triton",
        description="Triton gRPC streaming, or the OpenAI API",
        json_schema_extra=_says("unknown protocol {value!r}", f"use one of {', '.join(PROTOCOLS)}"),
    )
    model: str = Field("ensemble", description="Name of the served model (ensemble; tensorrt_llm for an llmapi --repo)")
    concurrency: str | None = Field(None, description="Fixed concurrency sweep, e.g. 1,8,64")
    rate: str | None = Field(None, description="Request-rate sweep (req/s), e.g. 1,2,4")
    poisson: bool = Field(False, description="Poisson arrivals (seeded) instead of constant")
    requests: int = Field(32, ge=1, description="Measured requests per load point")
    duration: float | None = Field(None, description="Stop a load point after N seconds")
    warmup: int = Field(
        2,
        ge=0,
        description="Requests sent first and excluded",
        json_schema_extra=_says("{flag} must be 0 or more, not {value}", "pass --warmup 0 to measure every request"),
    )
    input_tokens: str | None = Field(
        None, description="N | normal:M:S | uniform:LO:HI | file:P [default: the spec's traffic, else 64]"
    )
    output_tokens: str | None = Field(
        None, description="Same forms as --input-tokens [default: the spec's traffic, else 32]"
    )
    shared_prefix: str | None = Field(None, description="K:P:FRACTION shared system prompts")
    dataset: Path | None = Field(None, description='Prompts to send: JSONL of {"prompt": ...}')
    tokenizer: Path | None = Field(None, description="Tokenizer directory")
    repo: Path | None = Field(None, description="Emitted repository (tokenizer + provenance)")
    spec: Path | None = Field(None, description="Spec for SLOs, provenance and the planner floor")
    cell: str | None = Field(None, description="One matrix cell id (see `toolchain spec expand`)")
    metrics_url: str | None = Field(None, description="Prometheus URL, e.g. http://127.0.0.1:8002/metrics")
    stream: bool = Field(True, description="Stream tokens (--no-stream: one answer per request)")
    seed: int = Field(0, description="Seed of the prompts and of Poisson arrivals")
    stop_on_error: bool = Field(False, description="Stop at the first failed request")
    timeout: float = Field(
        DEFAULT_TIMEOUT_S,
        gt=0,
        description="Seconds before a request is abandoned",
        json_schema_extra=_says("{flag} must be a positive number of seconds, not {value}"),
    )
    idle_timeout: float = Field(
        DEFAULT_IDLE_TIMEOUT_S,
        gt=0,
        description="Seconds a request may receive nothing (connect, first token, between chunks) "
        "[never above --timeout]",
        json_schema_extra=_says("{flag} must be a positive number of seconds, not {value}"),
    )
    num_draft_tokens: int | None = Field(
        None, ge=1, description="Draft-target: drafts per verify step (tensorrt_llm_bls, with --no-stream)"
    )
    slo_search: str | None = Field(
        None,
        description="concurrency | rate: find the highest load that meets the SLOs (grow, then bisect); each probe "
        "sends at least --requests, 4 per stream or 4 s of its rate (docs/capacity.md)",
    )
    slo_start: float | None = Field(None, description="Lowest load the search probes [1]")
    slo_max: float | None = Field(None, description="Highest load the search probes [1024 streams, 10000 req/s]")
    slo_tolerance: float | None = Field(
        None, description="Stop when the bracket is this narrow: streams [1], rate fraction [0.05]"
    )
    slo_max_probes: int | None = Field(None, description="At most this many probes [16]")
    slo_ttft_ms: float | None = Field(None, description="P99 TTFT SLO in ms [the spec's slo.ttft_ms]")
    slo_tpot_ms: float | None = Field(None, description="P99 TPOT SLO in ms [the spec's slo.tpot_ms]")
    slo_goodput: float | None = Field(
        None, description="Fraction of requests that must meet both per-request SLOs, e.g. 0.95"
    )
    workers: int = Field(
        1,
        ge=1,
        le=MAX_WORKERS,
        description="Load-generator processes (one clock, merged timestamps)",
        json_schema_extra=_says(
            f"{{flag}} must be from 1 to {MAX_WORKERS} processes, not {{value}}", "e.g. --workers 4"
        ),
    )
    trace: Path | None = Field(
        None, description="Replay a Mooncake/AIPerf JSONL trace (timestamp, lengths, hash_ids): every line, on time"
    )
    trace_speed: str | None = Field(None, description="Replay speed(s), e.g. 1 or 1,2,4 (2 = twice as fast) [1]")
    trace_block_tokens: int = Field(512, ge=1, description="Prompt tokens per trace hash id")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _user_error(e) from e

    @model_validator(mode="after")
    def _rules(self) -> BenchOptions:
        """The rules on combinations of flags (each value's own bounds are its field's)."""
        check_slo_flags(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_goodput)
        self._plan()
        self._loads()
        return self

    @property
    def wire(self) -> str:
        """The protocol the load generator speaks: triton or openai (openai-chat is OpenAI's chat endpoint)."""
        return self.protocol.split("-")[0]

    @property
    def chat(self) -> bool:
        """Whether requests go to OpenAI's chat endpoint (--protocol openai-chat)."""
        return self.protocol == "openai-chat"

    @property
    def loads(self) -> tuple[Load, ...]:
        """The fixed load points: the trace's speeds, --concurrency, --rate, or one client at a time (an SLO search
        chooses its own)."""
        return tuple(self._loads())

    @property
    def search_plan(self) -> SearchPlan | None:
        """The SLO search's plan; None without --slo-search."""
        return self._plan()

    @property
    def slo_flags(self) -> dict[str, float | None]:
        """The SLOs given on the command line (each overrides the spec's)."""
        return {"ttft_ms": self.slo_ttft_ms, "tpot_ms": self.slo_tpot_ms, "goodput": self.slo_goodput}

    def _plan(self) -> SearchPlan | None:
        shaping = (self.slo_start, self.slo_max, self.slo_tolerance, self.slo_max_probes)
        if self.slo_search is None:
            if any(v is not None for v in shaping):
                raise UserInputError(
                    "--slo-start, --slo-max, --slo-tolerance and --slo-max-probes shape an --slo-search",
                    "add --slo-search concurrency|rate, or drop them",
                )
            return None
        if self.concurrency or self.rate or self.trace:
            raise UserInputError(
                "--slo-search chooses its own load points; --concurrency, --rate and --trace do not combine with it",
                "drop them, or drop --slo-search (--slo-start and --slo-max bound the search)",
            )
        return make_plan(
            self.slo_search,
            start=self.slo_start,
            limit=self.slo_max,
            tolerance=self.slo_tolerance,
            max_probes=self.slo_max_probes,
            poisson=self.poisson,
            duration_s=self.duration,
        )

    def _loads(self) -> list[Load]:
        if self.trace is not None:
            for name in ("concurrency", "rate", "dataset", "shared_prefix"):
                if getattr(self, name):  # a trace brings its own arrival times and prompts
                    raise UserInputError(
                        f"--trace brings its own arrival times and prompts; {flag(name)} cannot be combined with it",
                        f"drop {flag(name)}, or drop --trace",
                    )
            speeds = parse_list(self.trace_speed or "1", float)
            return [Load(trace=self.trace.name, speed=sp, duration_s=self.duration) for sp in speeds]
        if self.trace_speed is not None:
            raise UserInputError("--trace-speed scales a --trace", "pass --trace FILE too, or drop --trace-speed")
        conc, rates = parse_list(self.concurrency, int), parse_list(self.rate, float)
        if conc and rates:
            raise UserInputError("choose --concurrency or --rate, not both")
        return (
            [Load(concurrency=c, duration_s=self.duration) for c in conc]
            or [Load(rate=r, poisson=self.poisson, duration_s=self.duration) for r in rates]
            or [Load(concurrency=1, duration_s=self.duration)]
        )


_BOUNDS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be above {gt}",
    "less_than_equal": "must be at most {le}",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "finite_number": "must be a positive number",  # every float flag of bench is a positive amount
    "string_type": "must be text",
    "bool_type": "must be true or false",
    "path_type": "must be a path",
}


def _user_error(e: ValidationError) -> UserInputError:
    """The first problem pydantic found, as the one-line error of its flag (its field's own words where it has
    them)."""
    err = e.errors(include_url=False)[0]
    name = str(err["loc"][0]) if err["loc"] else ""
    field = BenchOptions.model_fields.get(name)
    if field is None:  # a keyword that is no field: a caller's mistake, said in its own words
        return UserInputError(f"bench has no option {name!r}", "see `toolchain bench --help`")
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    value = err.get("input")
    template = extra.get("error")
    if isinstance(template, str):
        return UserInputError(template.format(flag=flag(name), value=value), _text(extra.get("hint")))
    said = _BOUNDS.get(err["type"], err["msg"][:1].lower() + err["msg"][1:])
    return UserInputError(f"{flag(name)} {said.format(**err.get('ctx', {}))}, not {value!r}")


def _text(x: object) -> str | None:
    return x if isinstance(x, str) else None
