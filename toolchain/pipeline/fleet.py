"""`toolchain deploy`: plan the cell, emit its Triton repository under the engines root, write the deployment.

The stages meet here only: planning gives the fleet and memory figures, triton emits the repository (with
engine paths that name the engines root inside the pod, not this machine's cache), deploy writes the build
context and the manifests from both.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.artifacts.cell import CellArtifacts, for_cell
from toolchain.artifacts.keys import profile_id
from toolchain.artifacts.layout import cache
from toolchain.artifacts.rule_table import RULES, SIGNALS
from toolchain.deploy import DeployOptions, DeployResult, RuleTable, Sizing, check_options, size_cell, write_deployment
from toolchain.errors import DeployError, PlanError, TritonRepoError
from toolchain.specs.matrix import Cell, expand, find_cell
from toolchain.specs.models import EngineSpec

if TYPE_CHECKING:
    from toolchain.triton.emit import EngineInfo

_FULL_KEY = re.compile(r"^[0-9a-f]{64}$")


def _cell(spec: EngineSpec, cell_id: str | None) -> Cell:
    from toolchain.specs.rules import require_compatible

    cell = find_cell(spec, cell_id) if cell_id else expand(spec)[0]
    require_compatible(spec, [cell])
    return cell


def plan_for(cell: Cell, progress: Any = None) -> Any:
    """The cell's plan as `toolchain plan` makes it: the floor, and the silicon estimate where one is installed
    (the fleet deploy sizes by is the plan's own, ``CellPlan.sizing_fleet``); ``progress`` hears the estimate's
    start-up (AIConfigurator loads its database for seconds)."""
    from toolchain.planning.spec_plan import plan_spec

    (plan,) = plan_spec(cell.spec, cell.id, estimator="auto", progress=progress).plans
    if plan.errors:
        raise PlanError(f"cell {cell.id}: {plan.errors[0]}")
    return plan


def size_only(
    spec: EngineSpec, cell_id: str | None, options: DeployOptions, progress: Any = None
) -> tuple[Cell, Sizing]:
    """The pod and fleet sizing of a cell, without writing anything (`toolchain deploy --dry-run`)."""
    if options.engine_digest is not None:  # a malformed flag is refused however the command runs
        from toolchain.digest import pinned_digest

        pinned_digest(options.engine_digest, "--engine-digest")
    cell = _cell(spec, cell_id)
    if progress:
        progress(f"planning cell {cell.id}")
    sizing = size_cell(
        cell,
        plan_for(cell, progress),
        gpus_per_node=options.gpus_per_node,
        min_replicas=options.min_replicas,
        max_replicas=options.max_replicas,
    )
    return cell, sizing


def _engine_key(art: CellArtifacts, engine: str | None, registry: str, reference: bool) -> str:
    if engine:
        if _FULL_KEY.match(engine):
            return engine
        from toolchain.registry import open_registry

        return str(open_registry(registry).resolve(engine))
    if reference:
        raise DeployError(
            "the CPU reference deployment serves a checkpoint pushed to the registry; name its key",
            "push the checkpoint with `toolchain cache push DIR --kind checkpoint` and pass --engine KEY",
        )
    cell = art.cell
    key = art.engine_key
    if key is None:
        raise DeployError(
            f"the engine key of cell {cell.id} needs the checkpoint at {cell.spec.local_source()}",
            "pass --engine KEY (see `toolchain cache ls`), or put the checkpoint there",
        )
    return key


def deploy_cell(
    spec: EngineSpec,
    *,
    cell_id: str | None,
    out: Path,
    options: DeployOptions,
    engine: str | None = None,
    tokenizer: Path | None = None,
    reference: bool = False,
    progress: Any = lambda s: None,
) -> DeployResult:
    """Plan, emit and write the deployment of one cell."""
    from toolchain.outdir import check_output
    from toolchain.triton.emit import emit_repository

    check_options(options)  # before any work: a registry the pod cannot reach, an unknown frontend
    check_output(out, force=options.force)  # and an --out the command may not write
    cell = _cell(spec, cell_id)
    progress(f"planning cell {cell.id}")
    plan = plan_for(cell, progress)
    art = for_cell(cell)
    key = _engine_key(art, engine, options.registry, reference)
    options, unpinned = _pinned(options, key, progress)
    if spec.runtime == "pytorch":
        if reference:
            raise DeployError("--reference is for the tensorrt runtime's CPU reference model", "drop --reference")
        progress(f"writing the build context and manifests to {out}")
        res = write_deployment(
            cell,
            plan,
            repository=None,
            engine_key=key,
            out=out,
            options=options,
            host_paths=(cache().root, spec.base_dir),
        )
        res.warnings += unpinned
        return res
    tok = tokenizer if tokenizer is not None else _tokenizer_dir(art, progress)
    info, identity = _in_pod_engine(cell, key, options.engines_root, reference)
    progress("emitting the Triton repository" + (" (CPU reference model)" if reference else ""))
    with tempfile.TemporaryDirectory(prefix="toolchain-deploy-") as scratch:
        repo = emit_repository(
            cell,
            info,
            tok,
            Path(scratch) / "repo",
            identity=identity,
            reference=reference,
            reference_model_dir=spec.local_source() if reference else None,
            engines_root=options.engines_root,
        )
        progress(f"writing the build context and manifests to {out}")
        host = _host_paths(spec, Path(scratch), tok)
        res = write_deployment(
            cell,
            plan,
            repository=repo,
            engine_key=key,
            out=out,
            options=options,
            host_paths=host,
            rule_table=RuleTable(RULES, SIGNALS),
        )
    res.warnings += unpinned
    return res


def _pinned(options: DeployOptions, key: str, progress: Any) -> tuple[DeployOptions, list[str]]:
    """The options with the engine's manifest digest the pods must pull (--engine-digest as given, else read from
    the registry now), and the warning to say when there is none (docs/deploy.md, "The pods pull one manifest")."""
    from toolchain.registry.pin import pin_for_pods

    if options.engine_digest is not None:  # as given, in its one form (sha256:HEX, the '@' dropped)
        from toolchain.digest import pinned_digest

        return dataclasses.replace(options, engine_digest=pinned_digest(options.engine_digest, "--engine-digest")), []
    digest, warnings = pin_for_pods(options.registry, key, progress)
    return dataclasses.replace(options, engine_digest=digest), warnings


def _host_paths(spec: EngineSpec, scratch: Path, tok: Path) -> tuple[Path, ...]:
    """The paths of this machine that went into the deployment (none may appear in what is written)."""
    host: tuple[Path, ...] = (cache().root, spec.base_dir, scratch, tok)
    local = spec.local_source()
    if local is not None:
        host += (local,)
    return host


def _tokenizer_dir(art: CellArtifacts, progress: Any) -> Path:
    """The cell's tokenizer directory; for an ``hf://org/name@rev`` model with none here, its tokenizer files
    alone fetched from the Hub at that revision; else the deploy option that names one."""
    try:
        return art.tokenizer_dir()
    except TritonRepoError as e:
        source = art.spec.model.source
        if source.startswith("hf://"):
            from toolchain.artifacts.source import hub_tokenizer
            from toolchain.errors import CheckpointError
            from toolchain.triton.emit import TOKENIZER_FILES

            repo, rev = art.spec.model.hf_repo_revision()
            progress(f"fetching the tokenizer of {repo}@{rev or 'main'} from the Hugging Face Hub (no weights)")
            try:
                return hub_tokenizer(repo, rev, TOKENIZER_FILES, progress)
            except CheckpointError as fetch_error:
                raise DeployError(
                    f"no tokenizer for cell {art.cell.id} here, and {fetch_error.message}",
                    "pass --tokenizer DIR (the model's tokenizer files), or run `toolchain quantize SPEC`",
                ) from fetch_error
        raise DeployError(
            e.message, "pass --tokenizer DIR (the model's tokenizer files), or run `toolchain quantize SPEC`"
        ) from e


def _in_pod_engine(cell: Cell, key: str, engines_root: str, reference: bool) -> tuple[EngineInfo, dict[str, Any]]:
    """The engine as the pod will see it (restored under ``engines_root``) and the repository's identity."""
    from toolchain.triton.emit import EngineInfo

    in_pod = f"{engines_root.rstrip('/')}/{key}"
    info = dataclasses.replace(
        EngineInfo.predicted(cell),
        engine_dir=None if reference else in_pod,
        source=f"predicted from spec {cell.spec.name} for engine {key[:16]}, restored at start to {in_pod}",
    )
    identity = {"spec": cell.spec.name, "cell": cell.id, "engine_key": key, "profile_id": profile_id(cell, key)}
    return info, identity
