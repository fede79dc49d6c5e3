"""The ``dynamo`` block read against the whole spec: what it asks of Dynamo that Dynamo cannot do.

Kept apart from toolchain/specs/dynamo.py (the block's model, which models.py imports) so that no module of
the package needs the other's types both ways.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.specs.base import Problem
from toolchain.specs.dynamo import RELEASES, Pool

if TYPE_CHECKING:
    from toolchain.specs.models import EngineSpec


def problems(spec: EngineSpec) -> list[Problem]:
    """What the spec asks of Dynamo that Dynamo cannot do, with the reason and the alternative."""
    from toolchain.errors import UnknownGPUError
    from toolchain.hardware.catalog import lookup_gpu

    d = spec.dynamo
    if d is None:
        return []
    out: list[Problem] = []
    if spec.runtime != "pytorch":
        out.append(
            Problem(
                None,
                "dynamo.trtllm serves TensorRT-LLM's LLM API on the PyTorch backend only; prebuilt TensorRT engines "
                "(runtime: tensorrt) cannot run on it",
                "set runtime: pytorch to serve on Dynamo, or remove the dynamo block and serve the engines on Triton",
            )
        )
    if d.version not in RELEASES:
        out.append(
            Problem(
                None,
                f"Dynamo {d.version} is not a release the toolchain knows (known: {', '.join(RELEASES)})",
                f'set dynamo.version: "{next(iter(RELEASES))}"',
            )
        )
        return out
    trtllm, image = RELEASES[d.version]
    if spec.target.trtllm_version != trtllm:
        out.append(
            Problem(
                None,
                f"dynamo.trtllm {d.version} needs TensorRT-LLM {trtllm} (ai-dynamo[trtllm] pins it); the spec targets "
                f"{spec.target.trtllm_version}",
                f'set target.trtllm_version: "{trtllm}"',
            )
        )
    if spec.target.container and spec.target.container.split("@")[0] != image:
        out.append(
            Problem(
                None,
                f"Dynamo {d.version}'s TensorRT-LLM workers run in {image}, not {spec.target.container}",
                f"set target.container: {image} (or remove it)",
            )
        )
    for name in ("workers", "prefill", "decode"):
        pool: Pool = getattr(d, name)
        if pool.gpu is not None:
            try:
                lookup_gpu(pool.gpu)
            except UnknownGPUError as e:
                out.append(Problem(None, f"dynamo.{name}.gpu: {e.message}", "run `toolchain gpus` for catalog names"))
    return out
