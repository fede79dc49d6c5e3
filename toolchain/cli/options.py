"""Option aliases shared by every command, and the closed sets they accept.

One option name has one meaning in every command that takes it:

- ``--format``  the format of what the command prints (``matrix``: github, gitlab, json)
- ``--model``   the name of a served model (``bench``, ``diagnose``); a checkpoint directory is ``--checkpoint``
- ``--out``     the directory the command writes (``quantize``, ``triton emit``, ``bench report``, ``deploy``,
                ``dynamo deploy``, ``matrix``); a single result file is ``--save``
- ``--force``   replace the toolchain's own earlier output at ``--out``, never a file it did not write
                (``toolchain.outdir``)
- ``--dataset`` a file of prompts to send (``bench``); calibration data is ``--calib-dataset``
- ``--samples`` how many times a live server's metrics are sampled (``diagnose``); calibration is ``--calib-samples``
- ``--timeout`` seconds before one unit of work is abandoned: a build (``build``), a request (``bench``)
- ``--idle-timeout`` seconds one request may receive nothing before it is abandoned (``bench``)
- ``--digest``  the sha256 of an entry's manifest a pull must find (``cache pull``); ``--engine-digest`` is the
                same pin written into the pods (``deploy``, ``dynamo deploy``)

Every closed set is an Enum, so an unknown value is refused by the parser with the list of choices. The
values are the library's own (a test holds each Enum equal to the library's set); they are written out here so
that ``toolchain --help`` imports nothing heavy.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer


class MatrixFormat(str, Enum):
    github = "github"
    gitlab = "gitlab"
    json = "json"
    kubernetes = "kubernetes"
    argo = "argo"


class BenchProtocol(str, Enum):
    triton = "triton"
    openai = "openai"
    openai_chat = "openai-chat"


class WeightFormat(str, Enum):
    """Formats ``toolchain quantize`` writes (``toolchain.quantize.run.FORMATS``)."""

    fp8 = "fp8"
    int4_awq = "int4_awq"
    w4a8_awq = "w4a8_awq"
    int8_sq = "int8_sq"
    int8_wo = "int8_wo"
    nvfp4 = "nvfp4"


class KVCacheFormat(str, Enum):
    """KV-cache formats ModelOpt calibrates (``toolchain.quantize.run.KV_FORMATS``)."""

    none = "none"
    fp8 = "fp8"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class DeviceMap(str, Enum):
    """How a model larger than one GPU is spread over the visible GPUs (``toolchain.quantize.run.DEVICE_MAPS``)."""

    auto = "auto"
    balanced = "balanced"
    balanced_low_0 = "balanced_low_0"
    sequential = "sequential"


class AccuracyGate(str, Enum):
    """How the accuracy of a quantized model is measured (``toolchain.quantize.run.GATES``)."""

    auto = "auto"
    fakequant = "fakequant"
    dequant = "dequant"


class Estimator(str, Enum):
    """What `plan` and `dynamo plan` estimate with (``toolchain.planning.estimate.ESTIMATORS``)."""

    auto = "auto"
    aic = "aic"
    floor = "floor"


EstimatorOpt = Annotated[
    Estimator,
    typer.Option(
        "--estimator",
        help="auto: NVIDIA AIConfigurator's measured database beside the roofline floor when installed "
        "(scripts/setup-aic.sh), else the floor with a note; aic: require it (exit 3 without); floor: roofline only",
    ),
]


class Frontend(str, Enum):
    """What serves a deployment (``toolchain.deploy.FRONTENDS``)."""

    openai = "openai"
    kserve = "kserve"
    trtllm_serve = "trtllm-serve"


SpecArg = Annotated[Path, typer.Argument(help="Engine spec YAML (see engine_specs/)", show_default=False)]
SpecsArg = Annotated[list[Path], typer.Argument(help="One or more engine spec YAML files", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every column (the default fits 80 columns)")]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL: a local path, s3://bucket/prefix, hf://org/repo or oci://host[:port]/repository "
        "(default: $TOOLCHAIN_REGISTRY, else $TOOLCHAIN_CACHE/registry)",
    ),
]
# Where pods pull from: a URL they can reach, never this machine's cache (a deploy that pointed pods at a local
# path would write manifests no cluster can serve). Commands that write for a cluster take one of these.
PodRegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL the pods pull the engine from: s3://bucket/prefix, hf://org/repo, "
        "oci://host[:port]/repository, or a directory on --registry-pvc (required to write a deployment; "
        "default: $TOOLCHAIN_REGISTRY, never the local cache)",
    ),
]
DynamoRegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL the workers pull --engine from: s3://bucket/prefix, hf://org/repo or "
        "oci://host[:port]/repository (required with --engine; default: $TOOLCHAIN_REGISTRY, never the local cache)",
    ),
]
MatrixRegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL asked what is cached: a local path, s3://bucket/prefix, hf://org/repo or "
        "oci://host[:port]/repository (default: $TOOLCHAIN_REGISTRY, else $TOOLCHAIN_CACHE/registry; "
        "kubernetes and argo: the shared registry the pods push to, required, default: $TOOLCHAIN_REGISTRY, "
        "never the local cache)",
    ),
]
# The manifest digest the pods' pull is pinned to (`cache pull --digest`); `deploy` and `dynamo deploy` read it
# from the registry themselves when they can, so this is for a registry that cannot be read from where they run.
EngineDigestOpt = Annotated[
    str | None,
    typer.Option(
        "--engine-digest",
        help="sha256:HEX of the engine's manifest the pods must pull (the `pin:` line of `toolchain cache show KEY`); "
        "default: read from the registry now, else the pods pull whatever the key names (with a warning)",
    ),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would happen; change nothing")]
CellOpt = Annotated[str | None, typer.Option("--cell", help="One matrix cell id (see `toolchain spec expand`)")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace existing output (only what the toolchain wrote) / rebuild")
]
RehashOpt = Annotated[
    bool,
    typer.Option(
        "--rehash",
        help="Read every file of the quantized checkpoint again instead of trusting its verified stat signatures",
    ),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")]
ServedModelOpt = Annotated[
    str, typer.Option("--model", help="Name of the served model (ensemble; tensorrt_llm for an llmapi --repo)")
]
CheckpointOpt = Annotated[Path | None, typer.Option("--checkpoint", help="Hugging Face checkpoint directory")]
WorldSizeOpt = Annotated[
    int | None, typer.Option("--world-size", help="Ranks (default: the engine's)", min=1, max=1024)
]
MetricsUrlOpt = Annotated[
    str | None, typer.Option("--metrics-url", help="Prometheus URL, e.g. http://127.0.0.1:8002/metrics")
]
TokenizerOpt = Annotated[Path | None, typer.Option("--tokenizer", help="Tokenizer directory")]
RequestsOpt = Annotated[int, typer.Option("--requests", help="Measured requests per load point", min=1)]


def out_dir_opt(what: str) -> Any:
    """``--out DIR``: the directory a command writes; ``what`` says what goes in it."""
    return typer.Option("--out", help=f"Directory to write: {what}")


def timeout_opt(what: str) -> Any:
    """``--timeout SECONDS``: when one unit of work (``what``) is abandoned."""
    return typer.Option("--timeout", help=f"Seconds before {what} is abandoned", min=0.001)


def given_thresholds(
    max_rel_logit_error: float | None, min_top1_agreement: float | None, max_ppl_increase: float | None
) -> dict[str, float]:
    """The accuracy-gate thresholds given on the command line (``quantize``, ``accuracy``), by field name."""
    named = {
        "max_rel_logit_error": max_rel_logit_error,
        "min_top1_agreement": min_top1_agreement,
        "max_ppl_increase": max_ppl_increase,
    }
    return {k: v for k, v in named.items() if v is not None}
