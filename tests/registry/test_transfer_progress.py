"""Registry transfers report bytes moved of the entry's total (the CLI adds rate and ETA)."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.registry import open_registry


def test_push_and_pull_report_bytes_up_to_the_total(registry_url: str, tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.mkdir()
    (src / "rank0.engine").write_bytes(os.urandom(12 * 2**20))
    (src / "config.json").write_text("{}")
    total = 12 * 2**20 + 2
    calls: list[tuple[str, float | None, float | None, str]] = []
    reg = open_registry(registry_url)
    reg.progress = lambda stage, done=None, total=None, *, unit="", message=None: calls.append(
        (stage, done, total, unit)
    )
    key = "ab" * 32
    reg.put(key, src)
    push = [c for c in calls if c[0].startswith("push")]
    assert push[0][1] == 0 and push[-1][1] == push[-1][2] == total and {c[3] for c in push} == {"B"}
    done = [float(c[1] or 0) for c in push]
    assert all(b <= a for a, b in zip(done[1:], done, strict=False))  # never goes backwards
    if registry_url.startswith("s3://"):
        assert len(push) > 3, "S3 reports bytes while a file uploads, not only when it is done"
    calls.clear()
    reg.get(key, tmp_path / "out")
    pull = [c for c in calls if c[0].startswith("pull")]
    assert pull[-1][1] == pull[-1][2] == total
