"""What a model source in a spec may be: a local directory, or ``hf://org/name[@revision]``."""

from __future__ import annotations

import re
from pathlib import Path

# Matched with fullmatch (``$`` would accept a trailing newline); ASCII only. The revision is a branch,
# tag or commit (``refs/pr/3`` style names included); an empty one after ``@`` is refused.
HF_SOURCE = re.compile(
    r"hf://(?P<repo>[A-Za-z0-9_.\-]{1,96}/[A-Za-z0-9_.\-]{1,96})(@(?P<rev>[A-Za-z0-9_.\-/]{1,128}))?"
)


def check_hf_source(v: str) -> None:
    """Refuse an ``hf://`` source that is not ``hf://org/name`` with an optional non-empty revision."""
    if v.startswith("hf://") and not HF_SOURCE.fullmatch(v):
        raise ValueError(f"'{v[:120]}' is not hf://org/name[@revision]")


def hf_repo_revision(source: str) -> tuple[str, str | None]:
    """(org/name, revision or None) of a valid ``hf://`` source."""
    m = HF_SOURCE.fullmatch(source)
    if m is None:
        raise ValueError(f"{source} is not an hf:// source")
    return m.group("repo"), m.group("rev")


TINY_SPEC_NAME = "tiny"  # engine_specs/tiny.yaml: its checkpoint is made locally, never downloaded
TINY_SPEC_NAMES = (TINY_SPEC_NAME, "tiny-engine")  # tiny-engine.yaml: the same model on the engine path


def is_tiny(spec_name: str) -> bool:
    """The built-in tiny specs, whose random-weight checkpoint the toolchain makes itself."""
    return spec_name in TINY_SPEC_NAMES


def missing_checkpoint_hint(spec_name: str, where: Path) -> str:
    """What to do when a spec's local checkpoint is not at ``where``: the tiny spec's is one command away."""
    if is_tiny(spec_name):
        return f"create the tiny one there: toolchain tiny-checkpoint --out {where}"
    return "download the checkpoint there, or fix model.source"
