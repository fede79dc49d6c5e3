"""One gate for every command that takes a spec: the rules `toolchain spec validate` applies, at every door.

``checked_spec`` is what quantize, build, plan, triton emit, serve (through emit), up, deploy, matrix, bench and
the Dynamo commands call where they read a spec: it parses the file strictly and applies the family table
(``specs.families``) and every compatibility rule (``specs.rules``) to every matrix cell, exactly as
``spec validate`` does, and raises the same one-line ``CompatibilityError`` (the file, the first problem, how
many more, and the table's alternative as the hint; exit 2).

``reference_problem`` adds the one rule that only a command choosing ``--reference`` meets: the CPU
reference model stands in for the ``tensorrtllm`` backend (the ``inflight_batcher_llm`` layout of runtime
``tensorrt``); the LLM-API layout of runtime ``pytorch`` runs TensorRT-LLM's Python runtime in the
``tensorrt_llm`` Python model, which needs TensorRT-LLM and a GPU, so it is refused before anything is written
(docs/verdicts.md).
"""

from __future__ import annotations

from pathlib import Path

from toolchain.specs.models import EngineSpec


def checked_spec(path: str | Path) -> EngineSpec:
    """The spec at ``path``, parsed and validated as `spec validate` does; raises its error otherwise."""
    from toolchain.specs.rules import validate_spec_file

    spec, _ = validate_spec_file(Path(path))
    return spec


def reference_problem(spec: EngineSpec) -> tuple[str, str] | None:
    """(message, fix) when ``--reference`` cannot serve ``spec`` here, else None."""
    if spec.runtime != "pytorch":
        return None
    from toolchain.specs import families

    cfg = families.spec_config(spec)
    fam = families.family_of_config(cfg) if cfg is not None else None
    on_trt = fam is not None and families.verdict(fam, "tensorrt", spec.quantization.weights).ok
    fix = (
        "set runtime: tensorrt to serve it on the CPU reference model, or build the LLM-API artifact on a GPU "
        "host (`toolchain build SPEC --cell ID`) and pass --engine DIR"
        if on_trt or fam is None
        else "build the LLM-API artifact on a GPU host (`toolchain build SPEC --cell ID`) and pass --engine DIR "
        f"(runtime tensorrt is refused for {fam.name}: see docs/model-families.md)"
    )
    return (
        "--reference serves the inflight_batcher_llm layout (runtime tensorrt) on the CPU reference "
        "model; runtime pytorch's LLM-API layout runs TensorRT-LLM's Python runtime, which needs TensorRT-LLM "
        "and a GPU",
        fix,
    )


def require_reference_servable(spec: EngineSpec, engine: str) -> None:
    """Raise a CompatibilityError when ``engine`` is ``reference`` and the reference model cannot serve ``spec``."""
    from toolchain.errors import CompatibilityError

    if engine != "reference":
        return
    found = reference_problem(spec)
    if found is not None:
        raise CompatibilityError(*found)


def caveats(spec: EngineSpec) -> list[str]:
    """What the family table says with a "yes (caveat)" verdict for the spec's family, runtime and weights."""
    from toolchain.specs import families

    cfg = families.spec_config(spec)
    fam = families.family_of_config(cfg) if cfg is not None else None
    if fam is None:
        return []
    v = families.verdict(fam, spec.runtime, spec.quantization.weights)
    if not v.ok or not v.reason:
        return []
    return [f"{fam.name} on runtime {spec.runtime}: {v.reason} (docs/model-families.md)"]
