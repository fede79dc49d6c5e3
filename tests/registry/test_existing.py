"""Existence of many keys is one listing of the registry, not one request per key (S3: one LIST per
1,000 entries held instead of a HEAD per cell); the answer is the same as asking key by key."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tests.conftest import SPECS
from toolchain.pipeline.matrix import build_matrix
from toolchain.registry import open_registry
from toolchain.registry.store import FEW_KEYS


def key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def count_calls(reg: Any) -> list[Any]:
    """Every request the registry's backend sends: S3 API operation names, OCI (method, path), local: nothing."""
    calls: list[Any] = []
    s3 = getattr(reg.backend, "s3", None)
    if s3 is not None:
        s3.meta.events.register("before-call.s3.*", lambda model, **kw: calls.append(model.name))
    oci: list[tuple[str, str]] | None = getattr(reg.backend, "requests", None)
    if oci is not None:  # the OCI backend logs (method, path) of every request it sends
        oci.clear()
        return oci
    return calls


def test_existing_matches_exists_with_one_listing(registry_url: str, engine_dir: Path) -> None:
    reg = open_registry(registry_url)
    held = {key(i) for i in (3, 7, 11)}
    for k in held:
        reg.put(k, engine_dir)
    asked = [key(i) for i in range(40)]
    calls = count_calls(reg)
    got = reg.existing(asked)
    assert got == held == {k for k in asked if reg.exists(k)}
    if reg.url.startswith("s3://"):
        listing = calls[: calls.index("HeadObject")]
        assert listing == ["ListObjectsV2"]  # one page holds all three manifests
        calls.clear()
        assert reg.existing(asked[:FEW_KEYS]) == held & set(asked[:FEW_KEYS])
        assert calls == ["HeadObject"] * FEW_KEYS
    if reg.url.startswith("oci://"):  # one tags list, whatever the number of keys asked
        assert [m for m, _ in calls[:1]] == ["GET"] and calls[0][1].endswith("/tags/list")
        calls.clear()
        assert reg.existing(asked[:FEW_KEYS]) == held & set(asked[:FEW_KEYS])
        assert [p for _, p in calls] == [f"/v2/{reg.url.split('/', 3)[3]}/tags/list"]


def test_matrix_asks_s3_once_for_all_cells(s3_env: str, tmp_path: Path) -> None:
    import boto3

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="matrix-once")
    reg = open_registry("s3://matrix-once/engines")
    specs = sorted(SPECS.glob("*.yaml"))
    first = build_matrix(specs, registry=reg)["build"]
    assert len(first) > FEW_KEYS and not any(b["cached"] for b in first)
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "rank0.engine").write_bytes(b"x")
    hit = next(b for b in first if b.get("engine_key"))  # a cell whose key is unknown has none
    reg.put(hit["engine_key"], tmp_path / "eng")
    calls = count_calls(reg)
    again = build_matrix(specs, registry=reg)["build"]
    assert [b["id"] for b in again if b["cached"]] == [hit["id"]]
    assert calls == ["ListObjectsV2"]
