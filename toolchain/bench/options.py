"""What `toolchain bench` is asked to do: every flag in one frozen object that owns every rule on which values
and combinations are allowed.

``BenchOptions`` is the one argument of ``toolchain.pipeline.bench.run_benchmark`` and
``toolchain.bench.setup.make_config``. It is checked when it is made, before anything slow runs (no I/O here:
reading the spec, the tokenizer, the trace or the dataset is make_config's), and each mistake is a one-line
UserInputError naming the flag. A new flag is a field here, a rule in ``__post_init__``, and its use in
make_config; the CLI passes it through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.bench.loadgen import Load
from toolchain.bench.search import SearchPlan, check_slo_flags, make_plan
from toolchain.errors import UserInputError

PROTOCOLS = ("triton", "openai", "openai-chat")
MAX_WORKERS = 256


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


@dataclass(frozen=True)
class BenchOptions:
    """The bench flags (names as make_config has always taken them; the CLI flag is in each rule's message)."""

    url: str
    protocol: str = "triton"  # triton | openai | openai-chat
    model: str = "ensemble"
    concurrency: str | None = None  # "1,8,64"
    rate: str | None = None  # "1,2,4" requests per second
    poisson: bool = False
    requests: int = 32
    duration: float | None = None
    warmup: int = 2
    input_tokens: str | None = None
    output_tokens: str | None = None
    shared: str | None = None  # K:P:FRACTION
    dataset_path: Path | None = None
    tokenizer: Path | None = None
    repo: Path | None = None
    spec: Path | None = None
    cell_id: str | None = None
    metrics_url: str | None = None
    stream: bool = True
    seed: int = 0
    stop_on_error: bool = False
    timeout: float = 300.0
    idle_timeout: float | None = None  # the longest silence (--idle-timeout); None: the load generator's default
    num_draft_tokens: int | None = None
    workers: int = 1
    trace: Path | None = None
    trace_speed: str | None = None  # "1" or "1,2,4"
    trace_block_tokens: int = 512
    slo_search: str | None = None  # concurrency | rate
    slo_start: float | None = None
    slo_max: float | None = None
    slo_tolerance: float | None = None
    slo_max_probes: int | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_goodput: float | None = None
    # derived when made: the fixed load points (an SLO search chooses its own), and the search's plan
    loads: tuple[Load, ...] = field(init=False, repr=False)
    search_plan: SearchPlan | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.url:
            raise UserInputError("--url is required", "e.g. --url 127.0.0.1:8001 for Triton gRPC")
        check_slo_flags(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_goodput)
        plan = self._search_plan()
        if self.protocol not in PROTOCOLS:
            raise UserInputError(f"unknown protocol {self.protocol!r}", f"use one of {', '.join(PROTOCOLS)}")
        w = self.workers
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_WORKERS:
            raise UserInputError(f"--workers must be from 1 to {MAX_WORKERS} processes, not {w}", "e.g. --workers 4")
        loads = self._loads()
        if self.requests < 1:
            raise UserInputError("--requests must be at least 1")
        if self.warmup < 0:
            raise UserInputError(
                f"--warmup must be 0 or more, not {self.warmup}", "pass --warmup 0 to measure every request"
            )
        if not self.timeout > 0:  # also NaN
            raise UserInputError(f"--timeout must be a positive number of seconds, not {self.timeout}")
        if self.idle_timeout is not None and not 0 < self.idle_timeout < float("inf"):  # also NaN
            raise UserInputError(f"--idle-timeout must be a positive number of seconds, not {self.idle_timeout}")
        if self.num_draft_tokens is not None and self.num_draft_tokens < 1:
            raise UserInputError("--num-draft-tokens must be at least 1")
        object.__setattr__(self, "loads", tuple(loads))
        object.__setattr__(self, "search_plan", plan)

    def _search_plan(self) -> SearchPlan | None:
        """The SLO search's plan (None without --slo-search); its shaping flags need it, its own loads exclude
        the fixed ones."""
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
        """The fixed load points: the trace's speeds, --concurrency, --rate, or one client at a time."""
        if self.trace is not None:
            for flag, value in (
                ("--concurrency", self.concurrency),
                ("--rate", self.rate),
                ("--dataset", self.dataset_path),
                ("--shared-prefix", self.shared),
            ):
                if value:  # a trace brings its own arrival times and prompts
                    raise UserInputError(
                        f"--trace brings its own arrival times and prompts; {flag} cannot be combined with it",
                        f"drop {flag}, or drop --trace",
                    )
            speeds = parse_list(self.trace_speed or "1", float)
            if self.trace_block_tokens < 1:
                raise UserInputError(f"--trace-block-tokens must be at least 1, not {self.trace_block_tokens}")
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

    @property
    def slo_flags(self) -> dict[str, float | None]:
        """The SLOs given on the command line (each overrides the spec's)."""
        return {"ttft_ms": self.slo_ttft_ms, "tpot_ms": self.slo_tpot_ms, "goodput": self.slo_goodput}
