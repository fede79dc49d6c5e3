"""Where the source checkpoint of a spec is on this machine (an ``hf://`` source is downloaded first)."""

from __future__ import annotations

from pathlib import Path

from toolchain._deps import require
from toolchain.errors import CheckpointError
from toolchain.specs.models import EngineSpec


def source_dir(spec: EngineSpec) -> Path:
    """The local checkpoint a spec names; an hf:// source is fetched (config + safetensors) into HF's cache."""
    local = spec.local_source()
    if local is not None:
        return Path(local)
    repo, rev = spec.model.hf_repo_revision()
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
            "check network and HF_TOKEN, or download it and point model.source at the directory",
        ) from e
