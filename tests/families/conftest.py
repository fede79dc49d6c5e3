"""Family fixtures: one tiny checkpoint per family, made once per session and only read by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import built_once


@pytest.fixture(scope="session")
def family_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random checkpoint (default sizes) of every family the table names, and of gpt_neox, which it does not.

    Three modules made this same set each (test_entry_points, test_family_rules, test_streamed_text); tests pass
    the directories to commands that read them and write elsewhere."""
    from toolchain.quantize.tiny import make_tiny_checkpoint
    from toolchain.specs import families

    names = [*families.FAMILIES, "gpt_neox"]

    def build(root: Path) -> Path:
        for f in names:
            make_tiny_checkpoint(root / f, family=f)
        return root

    root = built_once(tmp_path_factory, "families", build)
    return {f: root / f for f in names}
