"""Where the source checkpoint of a spec is on this machine (an ``hf://`` source is downloaded first)."""

from __future__ import annotations

from pathlib import Path

from toolchain._deps import require
from toolchain.errors import CheckpointError
from toolchain.specs.models import EngineSpec
from toolchain.specs.sources import hf_repo_revision


def source_dir(spec: EngineSpec) -> Path:
    """The local checkpoint a spec names; an hf:// source is fetched (config + safetensors) into HF's cache."""
    local = spec.local_source()
    if local is not None:
        return Path(local)
    repo, rev = spec.model.hf_repo_revision()
    return _download(repo, rev, "model.source")


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


def _download(repo: str, rev: str | None, what: str) -> Path:
    hub = require("huggingface_hub", "hf")
    try:
        return Path(
            hub.snapshot_download(
                repo, revision=rev, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model"]
            )
        )
    except Exception as e:
        raise CheckpointError(
            f"cannot download {repo}@{rev or 'main'}: {type(e).__name__}",
            f"check network and HF_TOKEN, or download it and point {what} at the directory",
        ) from e
