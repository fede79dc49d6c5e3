"""The latency metrics every Triton the toolchain starts exports, and a launcher that gives them to the OpenAI frontend.

Triton's ``--metrics-config`` settings (triton-inference-server/server ``docs/user_guide/metrics.md``; parsed by
triton-inference-server/core ``src/metric_model_reporter.cc``, branches r24.10 = Triton 2.51 and r25.12 = 2.64):

- ``summary_latencies=true``: per-model summaries ``nv_inference_{request,queue,compute_input,compute_infer,
  compute_output}_summary_us`` with quantiles 0.5/0.9/0.95/0.99/0.999 (both releases): the queue P99 the
  ``undersized`` rule and alert read;
- ``histogram_latencies=true``: ``nv_inference_first_response_histogram_ms``, time to the first response, for
  decoupled models (2.52 and later; 2.65 extends it to non-decoupled ones): the TTFT quantiles and SLO burn rates.
  Triton 2.51 (the CPU run) accepts the setting and ignores it: its core matches only the settings it knows.
- ``counter_latencies`` stays at its default (on): the cumulative ``*_duration_us`` counters the ScaledObject uses.

``tritonserver`` takes them as flags (``metrics_args``). The OpenAI frontend (``openai_frontend/main.py``) starts
Triton in process with ``tritonserver.Server(...)`` and has no flag for them, so ``python -m
toolchain.triton.metrics_config MAIN.py ARGS...`` runs that main with the same settings given to the in-process
server (``tritonserver.Server``'s ``metrics_configuration`` option, global group ``""``).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

METRICS_CONFIG: tuple[tuple[str, str], ...] = (("summary_latencies", "true"), ("histogram_latencies", "true"))


def metrics_args() -> list[str]:
    """The ``--metrics-config`` flags of tritonserver."""
    return [f"--metrics-config={k}={v}" for k, v in METRICS_CONFIG]


def _patch_in_process_server() -> None:
    """Make ``tritonserver.Server(...)`` default its ``metrics_configuration`` to ``METRICS_CONFIG``."""
    import tritonserver  # the container's in-process Triton bindings

    base: Any = tritonserver.Server

    class Server(base):  # type: ignore[misc]
        def __init__(self, options: Any = None, **kwargs: Any) -> None:
            if options is None:
                settings = dict(kwargs.get("metrics_configuration") or {})
                settings[""] = {**dict(METRICS_CONFIG), **settings.get("", {})}
                kwargs["metrics_configuration"] = settings
            super().__init__(options, **kwargs)

    tritonserver.Server = Server


def main(argv: list[str]) -> int:
    if not argv or not argv[0].endswith(".py"):
        sys.stderr.write("usage: python -m toolchain.triton.metrics_config OPENAI_MAIN.py [ARGS...]\n")
        return 2
    script = Path(argv[0])
    _patch_in_process_server()
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.resolve().parent))  # main.py imports its sibling packages
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
