"""Where the source checkpoint of a spec is on this machine (an ``hf://`` source is downloaded first)."""

from __future__ import annotations

from pathlib import Path

from toolchain._deps import require
from toolchain.errors import CheckpointError, HubUnavailableError
from toolchain.progress import Progress, silent
from toolchain.specs.models import EngineSpec
from toolchain.specs.sources import hf_repo_revision, missing_checkpoint_hint


def source_dir(spec: EngineSpec, progress: Progress = silent) -> Path:
    """The local checkpoint a spec names; an hf:// source is fetched (config + safetensors) into HF's cache."""
    local = spec.local_source()
    if local is not None:
        if not Path(local).is_dir():
            raise CheckpointError(f"checkpoint not found at {local}", missing_checkpoint_hint(spec.name, Path(local)))
        return Path(local)
    repo, rev = spec.model.hf_repo_revision()
    return _download(repo, rev, "model.source", progress)


def model_dir(source: str, what: str, *, adapter: bool = False) -> Path:
    """A carried model's local directory: ``source`` is an absolute local path or ``hf://org/name@rev``
    (downloaded at that revision into HF's cache). ``what`` names the spec field, for errors. It must hold
    safetensors weights: a LoRA adapter its ``adapter_config.json`` and ``adapter_model.safetensors``, a
    draft model ``config.json`` and ``*.safetensors`` (pickle weights are not carried)."""
    if source.startswith("hf://"):
        repo, rev = hf_repo_revision(source)
        p = _download(repo, rev, what)
    else:
        p = Path(source)
        if not p.is_dir():
            raise CheckpointError(f"{what} {p} is not a directory", f"point {what} at the model's local directory")
    need = ["adapter_config.json", "adapter_model.safetensors"] if adapter else ["config.json"]
    missing = [n for n in need if not (p / n).is_file()]
    if not adapter and not any(p.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise CheckpointError(
            f"{what} ({source}) has no {', '.join(missing)}",
            "carried models need safetensors weights: convert pickle (*.bin) weights with safetensors, "
            f"or point {what} at a complete {'adapter' if adapter else 'checkpoint'}",
        )
    return p


def carried_dir(rel: str, source: str) -> Path:
    """The local directory of a model an LLM-API artifact or repository carries at ``rel``
    (``toolchain.specs.llmapi.bundled_models``), checked to hold its weights."""
    from toolchain.specs.llmapi import DRAFT_REL, carried_field

    return model_dir(source, carried_field(rel), adapter=rel != DRAFT_REL)


def _hub_unavailable(e: BaseException, doing: str) -> HubUnavailableError | None:
    """The transient error (exit 75) for a Hub that could not be reached, timed out or answered 429/5xx while
    ``doing``; None when ``e`` is another failure (a missing repository, no access, offline by setting)."""
    from huggingface_hub import constants

    from toolchain import http, hub, settings

    if not http.transient(e):
        return None
    stopped = hub.stopped_message(e)
    if stopped is not None:
        return HubUnavailableError(f"cannot {doing}: {stopped}")
    endpoint = http.redact(settings.hf_endpoint(constants.ENDPOINT))
    return HubUnavailableError(
        f"cannot {doing}: the Hugging Face Hub at {endpoint} did not answer (or answered 429/5xx)"
    )


def _download(repo: str, rev: str | None, what: str, progress: Progress = silent) -> Path:
    hub = require("huggingface_hub", "hf")
    from toolchain import hub as guard

    where = f"{repo}@{rev or 'main'}"
    guard.install()  # every read bounded by TOOLCHAIN_HF_STALL_TIMEOUT, a stall named (toolchain/hub.py)
    try:
        with guard.reporting(None if progress is silent else (lambda line: progress(line))):
            return Path(
                hub.snapshot_download(
                    repo, revision=rev, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model"]
                )
            )
    except Exception as e:
        unavailable = _hub_unavailable(e, f"download {where}")
        if unavailable is not None:
            raise unavailable from e
        raise CheckpointError(
            f"cannot download {where}: {_hub_reason(e)}",
            f"check the repository name, revision and HF_TOKEN, or download it and point {what} at the directory",
        ) from e


def _hub_reason(e: BaseException) -> str:
    """What huggingface_hub says went wrong, in words (its exception's name says it: RepositoryNotFoundError ->
    'repository not found'), for a permanent failure."""
    import re

    name = type(e).__name__.removesuffix("Error").removesuffix("Exception")
    words = re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()
    return {
        "repository not found": "no such repository, or no access to it (HF_TOKEN)",
        "gated repo": "the repository is gated: accept its terms on the Hub and set HF_TOKEN",
        "revision not found": "no such revision",
        "local entry not found": "not in the local cache, and the Hub was not asked (offline)",
        "offline mode is enabled": "HF_HUB_OFFLINE is set and it is not cached",
    }.get(words, words or "the Hub refused it")


def hub_tokenizer(repo: str, rev: str | None, files: tuple[str, ...], progress: Progress = silent) -> Path:
    """The tokenizer files (``files``, those that exist) of ``repo`` at ``rev``, fetched one by one into HF's
    cache and nothing else (no weights): their snapshot directory. Offline (``HF_HUB_OFFLINE``) or with the Hub
    unreachable, only what the cache already holds; neither holding a tokenizer is a CheckpointError."""
    hub = require("huggingface_hub", "hf")
    from huggingface_hub import constants
    from huggingface_hub.errors import EntryNotFoundError

    from toolchain import hub as guard
    from toolchain import settings
    from toolchain.specs.arch import HUB_PROBE_TIMEOUT_S, _reachable

    where = f"{repo}@{rev or 'main'}"
    offline = settings.hf_offline(constants.HF_HUB_OFFLINE)
    endpoint = settings.hf_endpoint(constants.ENDPOINT)
    why = "HF_HUB_OFFLINE is set" if offline else None
    if why is None and not _reachable(endpoint, HUB_PROBE_TIMEOUT_S):
        why = f"the Hugging Face Hub at {endpoint} is not reachable within {HUB_PROBE_TIMEOUT_S:.0f} s"
    got: list[Path] = []
    guard.install()  # every read bounded by TOOLCHAIN_HF_STALL_TIMEOUT, a stall named (toolchain/hub.py)
    for name in files:
        try:
            if why is not None:
                path = hub.hf_hub_download(repo, name, revision=rev, local_files_only=True)
            else:
                with guard.reporting(None if progress is silent else (lambda line: progress(line))):
                    path = hub.hf_hub_download(
                        repo, name, revision=rev, endpoint=endpoint, etag_timeout=HUB_PROBE_TIMEOUT_S
                    )
        except EntryNotFoundError:  # not in the repository (or, offline, not in the cache)
            continue
        except Exception as e:
            unavailable = _hub_unavailable(e, f"fetch the tokenizer of {where}")
            if unavailable is not None:
                raise unavailable from e
            raise CheckpointError(
                f"cannot fetch the tokenizer of {where} ({_hub_reason(e)})",
                "check the network and HF_TOKEN, or pass --tokenizer DIR (the model's tokenizer files)",
            ) from e
        got.append(Path(path))
    if not any(p.name in ("tokenizer.json", "tokenizer_config.json") for p in got):
        state = f"not cached and {why}" if why else "the repository has no tokenizer.json or tokenizer_config.json"
        raise CheckpointError(f"cannot fetch the tokenizer of {where}: {state}", "pass --tokenizer DIR")
    return got[0].parent
