"""Issue 47 (E): one directory has one content key on every backend. The key was the sha256 of the listing of
each file's digest in the store's own algorithm (blake3 on a local or S3 store, sha256 on OCI), so the same
directory was ``cfd16685...`` on a local registry and ``a299b6ac...`` on OCI. Now the listing is always of sha256
digests; entries stored under the old form of a key keep it and pull as before."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import Cli
from toolchain.digest import hash_file
from toolchain.registry import open_registry


def _reference_key(src: Path, algo: str = "sha256") -> str:
    """The content key computed here from its definition, independent of the registry's code."""
    listing = {}
    for p in sorted(src.rglob("*")):
        if p.is_file() and not p.is_symlink():
            rel = p.relative_to(src).as_posix()
            digest = f"sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}" if algo == "sha256" else hash_file(p, algo)
            listing[rel] = [digest, bool(p.stat().st_mode & 0o111)]
    text = json.dumps(dict(sorted(listing.items())), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def content(tmp_path: Path) -> Path:
    d = tmp_path / "content"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"a": 1}')
    (d / "rank0.engine").write_bytes(os.urandom(200_000))
    (d / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (d / "sub" / "run.sh").chmod(0o755)
    return d


@pytest.mark.slow
def test_one_directory_has_one_key_on_every_backend(
    request: pytest.FixtureRequest, content: Path, tmp_path: Path, oci_url: str
) -> None:
    request.getfixturevalue("s3_env")
    import boto3

    bucket = f"key-{os.getpid()}-{abs(hash(tmp_path)) % 10**8}"
    boto3.client("s3", endpoint_url=os.environ["TOOLCHAIN_S3_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    urls = [str(tmp_path / "registry"), f"s3://{bucket}/engines", oci_url]
    keys = {url: open_registry(url).put(None, content).key for url in urls}
    assert set(keys.values()) == {_reference_key(content)}, keys
    assert _reference_key(content) != _reference_key(content, "blake3")  # the old local form differed


def test_a_key_from_a_local_push_tags_and_pulls_on_oci(cli: Cli, content: Path, tmp_path: Path, oci_url: str) -> None:
    local = str(tmp_path / "registry")
    r = cli("cache", "push", content, "--registry", local)
    assert r.exit_code == 0, r.output
    key = r.stdout.strip().splitlines()[-1].split()[-1]
    assert key == _reference_key(content), r.stdout
    r = cli("cache", "push", content, "--registry", oci_url)
    assert r.exit_code == 0 and r.stdout.strip().splitlines()[-1].split()[-1] == key, r.output
    r = cli("cache", "tag", key[:12], "prod", "--registry", oci_url)  # the short key the local push printed
    assert r.exit_code == 0, r.output
    r = cli("cache", "pull", "prod", tmp_path / "out", "--registry", oci_url)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "rank0.engine").read_bytes() == (content / "rank0.engine").read_bytes()


@pytest.mark.parametrize("backend", ["local", "oci"])
def test_entries_published_under_the_old_key_forms_still_pull(
    request: pytest.FixtureRequest, backend: str, content: Path, tmp_path: Path, cli: Cli
) -> None:
    url = str(tmp_path / "registry") if backend == "local" else request.getfixturevalue("oci_url")
    reg = open_registry(url)
    # what the old code named this directory on each backend: its digests in the store's algorithm
    old = _reference_key(content, "blake3" if backend == "local" else "sha256")
    reg.put(old, content)  # an entry published before the fix, under its old key
    for ref in (old, old[:12]):
        dest = tmp_path / f"out-{ref[:12]}-{len(ref)}"
        r = cli("cache", "pull", ref, dest, "--registry", url)
        assert r.exit_code == 0, r.output
        assert (dest / "sub" / "run.sh").read_bytes() == (content / "sub" / "run.sh").read_bytes()
    new = reg.put(None, content)  # pushing it again names it by the one key; the old one stays
    assert new.key == _reference_key(content) and reg.exists(old) and reg.exists(new.key)
    assert new.files == reg.show(old).files  # the same blobs: nothing stored twice
