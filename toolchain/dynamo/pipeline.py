"""The Dynamo commands' stages: spec → cell → plan → (deployment files | a local run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolchain.dynamo.plan import DynamoPlan, Silicon, plan_dynamo
from toolchain.errors import EstimateUnavailableError, SpecError, UserInputError
from toolchain.planning.estimate import Estimator
from toolchain.progress import Progress, silent
from toolchain.specs.arch import ModelArch
from toolchain.specs.matrix import Cell
from toolchain.specs.models import EngineSpec


@dataclass
class Planned:
    cell: Cell
    arch: ModelArch
    plan: DynamoPlan


def dynamo_spec(spec_path: Path) -> EngineSpec:
    """The spec, checked by every `spec validate` rule (specs.gate), with a dynamo block."""
    from toolchain.specs.gate import checked_spec

    spec = checked_spec(spec_path)
    if spec.dynamo is None:
        raise SpecError(
            "the spec has no dynamo block", file=spec_path, hint="add `dynamo: {mode: disaggregated}` (docs/dynamo.md)"
        )
    return spec


def plan_spec(
    spec_path: Path,
    cell_id: str | None = None,
    *,
    mode: str | None = None,
    estimator: Estimator = "floor",
    progress: Progress = silent,
) -> Planned:
    """Load, validate (every `spec validate` rule) and plan the spec's Dynamo deployment for one cell: timed by the
    roofline floor, or (``estimator`` "auto"/"aic", as `toolchain plan` takes it) by NVIDIA AIConfigurator's
    measured database with the floor's GPU count beside it ("auto" without the database: the floor and a note)."""
    return plan_loaded(dynamo_spec(spec_path), cell_id, mode=mode, estimator=estimator, progress=progress)


def plan_loaded(
    spec: EngineSpec,
    cell_id: str | None = None,
    *,
    mode: str | None = None,
    estimator: Estimator = "floor",
    progress: Progress = silent,
) -> Planned:
    """:func:`plan_spec` of a spec already loaded and checked (:func:`dynamo_spec`)."""
    from toolchain.specs.arch import arch_for_spec
    from toolchain.specs.matrix import expand, find_cell
    from toolchain.specs.rules import require_compatible

    block = spec.dynamo
    assert block is not None  # dynamo_spec refuses a spec without one
    if mode is not None and mode != block.mode:
        spec = spec.model_copy(update={"dynamo": block.model_copy(update={"mode": mode})}).with_base_dir(spec.base_dir)
    cell = find_cell(spec, cell_id) if cell_id else expand(spec)[0]
    require_compatible(spec, [cell])
    arch = arch_for_spec(spec)
    floor = plan_dynamo(cell, arch)
    if estimator == "floor":
        return Planned(cell, arch, floor)
    return Planned(cell, arch, _silicon_plan(cell, arch, floor, estimator, progress))


def _silicon_plan(
    cell: Cell, arch: ModelArch, floor: DynamoPlan, estimator: Estimator, progress: Progress
) -> DynamoPlan:
    from toolchain.planning import estimate

    session = estimate.open_session(cell.spec, arch, estimator, progress)
    if session is None:
        floor.notes.append(
            f"{estimate.missing_message()}: the pools are timed by the roofline floor only (a lower bound; install it: "
            "scripts/setup-aic.sh)"
        )
        return floor
    try:
        silicon = Silicon(session, arch)
        plan = plan_dynamo(cell, arch, silicon)
    finally:
        session.close()
    if estimator == "aic" and silicon.misses:
        raise EstimateUnavailableError(f"cell {cell.id}: no silicon estimate for {silicon.misses[0]}")
    plan.floor_gpus = floor.total_gpus
    return plan


def up(
    spec_path: Path,
    *,
    cell_id: str | None = None,
    mode: str | None = None,
    workdir: Path | None = None,
    http_port: int | None = None,
    speedup: float | None = None,
    ready_timeout: float = 120.0,
    estimator: Estimator = "floor",
    progress: Progress = silent,
) -> tuple[Planned, object]:
    """Plan the spec and bring its topology up here with the Dynamo mocker; returns the plan and the
    running LocalDeployment (the caller stops it). ``workdir`` defaults to a new run directory under
    ``$TOOLCHAIN_CACHE/dynamo/``, where the logs outlive the run."""
    from toolchain.artifacts.layout import cache
    from toolchain.dynamo.card import write_card
    from toolchain.dynamo.env import dynamo_python
    from toolchain.dynamo.local import start_local

    if speedup is not None and not speedup > 0:  # also NaN
        raise UserInputError(f"--speedup must be a positive number, not {speedup}", "e.g. --speedup 10")
    planned = plan_spec(spec_path, cell_id, mode=mode, estimator=estimator, progress=progress)  # the spec first
    python = dynamo_python()
    if workdir is None:
        workdir = cache().dynamo_run(planned.cell.spec.name)
    workdir.mkdir(parents=True, exist_ok=True)
    progress("writing the stand-in model card (tokenizer + the model's shape)")
    card = write_card(workdir / "model", planned.arch, planned.cell.spec.name)
    dep = start_local(
        planned.cell,
        planned.plan,
        card,
        workdir=workdir,
        python=python,
        http_port=http_port,
        speedup=speedup,
        ready_timeout=ready_timeout,
        progress=progress,
    )
    return planned, dep


@dataclass
class Deployed:
    planned: Planned
    files: dict[str, Path]
    engine_key: str | None
    warnings: list[str]
    engine_digest: str | None = None  # the manifest the pull init containers are pinned to

    def to_json(self) -> dict[str, object]:
        return {
            "files": {k: str(v) for k, v in self.files.items()},
            "plan": self.planned.plan.to_json(),
            "engine_key": self.engine_key,
            "engine_digest": self.engine_digest,
            "warnings": self.warnings,
        }


def checked_pin(engine: str | None, engine_digest: str | None) -> str | None:
    """``--engine-digest`` as ``sha256:<hex>``; refused (one line) when malformed, or given without ``--engine``
    (the pin is on the pull step, which only an artifact has). The same with and without --dry-run."""
    if engine_digest is None:
        return None
    from toolchain.digest import pinned_digest

    digest = pinned_digest(engine_digest, "--engine-digest")
    if not engine:
        raise UserInputError(
            "--engine-digest pins the artifact the pull step restores, and there is no pull without --engine",
            "pass --engine KEY of the artifact, or drop --engine-digest",
        )
    return digest


def deploy(
    spec_path: Path,
    out: Path,
    *,
    cell_id: str | None = None,
    namespace: str = "default",
    model_path: str | None = None,
    engine: str | None = None,
    registry: str | None = None,
    registry_secret: str | None = None,
    toolchain_image: str | None = None,
    public_key: Path | None = None,
    engine_digest: str | None = None,
    estimator: Estimator = "floor",
    progress: Progress = silent,
    force: bool = False,
    allow_unquantized: bool = False,
) -> Deployed:
    """Plan the spec's Dynamo deployment and write its DynamoGraphDeployment. ``engine`` means what it means for
    `toolchain deploy`: a full key, a unique key prefix, a tag or a digest reference, resolved in ``registry``
    (the one the pull init container reads). A spec that plans quantized weights is refused without a quantized
    artifact (``engine``) or checkpoint (``model_path``): the workers would serve the unquantized Hub model the
    pools were not sized for; ``allow_unquantized`` writes it anyway, with the mismatch as a warning. The pull
    init containers are pinned to the artifact's manifest digest: ``engine_digest`` as given, else the one the
    registry serves now; when it cannot be read from here, they pull whatever the key names, with a warning."""
    from toolchain import settings
    from toolchain.dynamo.deploy import Artifact, check_registry, precision_mismatch, write_dgd

    artifact = None
    pem = None
    warnings: list[str] = []
    engine_digest = checked_pin(engine, engine_digest)
    if public_key is not None:
        if not engine:
            raise UserInputError(
                "--public-key makes the pull step require a signature, and there is no pull without --engine",
                "pass --engine KEY of the signed artifact, or drop --public-key",
            )
        from toolchain.registry.signing import load_verifier

        load_verifier(public_key)  # a malformed or non-P-256 key is refused here, not at the pod's start
        pem = public_key.read_bytes()
    if engine:
        reg = registry or settings.registry_url()
        if not reg or not toolchain_image:
            raise UserInputError(
                "--engine needs --registry (s3://, hf:// or oci://) and an image with the toolchain for the pull "
                "init container",
                "pass both, or drop --engine to let dynamo.trtllm download the spec's Hub model",
            )
        check_registry(reg)  # before any network: a path of this machine is the user's mistake
        key = _resolve_engine(engine, reg)
        if engine_digest is None:
            from toolchain.registry.pin import pin_for_pods

            engine_digest, unpinned = pin_for_pods(reg, key, progress)
            warnings += unpinned
        artifact = Artifact(key, reg, toolchain_image, registry_secret, pem, engine_digest)
    spec = dynamo_spec(spec_path)  # loaded and checked once, for the precision check and the plan
    mismatch = precision_mismatch(spec, artifact) if not model_path else None
    if mismatch is not None and not allow_unquantized:
        raise UserInputError(*mismatch)  # before the plan's seconds and before anything is written
    planned = plan_loaded(spec, cell_id, estimator=estimator, progress=progress)
    files = write_dgd(
        planned.cell, planned.plan, out, namespace=namespace, model_path=model_path, artifact=artifact, force=force
    )
    if mismatch:
        warnings.append(f"{mismatch[0]}; written as asked (--allow-unquantized)")
    return Deployed(planned, files, artifact.key if artifact else None, warnings, engine_digest)


def _resolve_engine(engine: str, registry: str) -> str:
    from toolchain.registry.manifest import KEY_RE

    if KEY_RE.fullmatch(engine):
        return engine  # a full key: nothing to ask the registry
    from toolchain.registry import open_registry

    return open_registry(registry).resolve(engine)
