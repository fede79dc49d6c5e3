"""Local-backend specifics: the documented layout, link restores, S3 errors, URL schemes, CLI."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import toolchain.registry as registry_pkg
from tests.conftest import Cli
from toolchain.errors import RegistryUnavailableError, RegistryURLError
from toolchain.registry import open_registry
from toolchain.registry.backends import LocalBackend

K1 = "a" * 64


def test_layout_matches_module_docstring(tmp_path: Path, engine_dir: Path) -> None:
    r = open_registry(str(tmp_path / "reg"))
    m = r.put(K1, engine_dir)
    r.tag(K1, "v1")
    doc = registry_pkg.__doc__ or ""
    for part in ("blobs/<algo>/<hh>/<hex>", "manifests/<key>.json", "refs/tags/<name>", "tmp/", "lock"):
        assert part in doc
    files = {p.relative_to(tmp_path / "reg").as_posix() for p in (tmp_path / "reg").rglob("*") if p.is_file()}
    expected = {f"manifests/{K1}.json", "refs/tags/v1", "lock"}
    for f in m.files.values():
        algo, hexd = f.digest.split(":")
        expected.add(f"blobs/{algo}/{hexd[:2]}/{hexd}")
    assert files == expected
    assert json.loads((tmp_path / "reg" / "manifests" / f"{K1}.json").read_text())["key"] == K1


def test_local_restore_copies_by_default_and_links_only_when_asked(tmp_path: Path, engine_dir: Path) -> None:
    from toolchain.registry.store import blob_path

    r = open_registry(str(tmp_path / "reg"))
    m = r.put(K1, engine_dir)
    backend = r.backend
    assert isinstance(backend, LocalBackend)
    blob = backend.local_path(blob_path(m.files["rank0.engine"].digest))
    assert blob is not None
    r.get(K1, tmp_path / "o")
    assert backend.restore_methods <= {"reflink", "kernel-copy", "copy"} and backend.restore_methods
    restored = tmp_path / "o" / "rank0.engine"
    assert not os.path.samefile(restored, blob)
    restored.write_bytes(b"edited after pull")  # a pulled engine is the user's own file
    assert r.verify().corrupt == {}
    r.get(K1, tmp_path / "linked", link=True)
    assert backend.restore_methods >= {"hardlink"}
    linked = tmp_path / "linked" / "rank0.engine"
    assert os.path.samefile(linked, blob)
    assert not (linked.stat().st_mode & 0o222)  # read-only: the blob must not be edited through it


@pytest.mark.parametrize(
    ("kernel", "method"),
    [("works", "kernel-copy"), ("exdev", "copy"), ("stops-short", "copy")],
)
def test_copy_restore_verifies_what_landed_with_or_without_copy_file_range(
    tmp_path: Path, engine_dir: Path, monkeypatch: pytest.MonkeyPatch, kernel: str, method: str
) -> None:
    """Where reflinks are refused, a pull copies in the kernel (copy_file_range) and hashes the copy;
    where that is refused, or stops short, it reads, hashes and writes in one pass. A bad blob is caught
    either way."""
    import errno
    import fcntl

    from toolchain.errors import CorruptArtifactError
    from toolchain.registry.store import blob_path

    def no_reflink(*args: Any) -> None:
        raise OSError(errno.EOPNOTSUPP, "no reflink")

    monkeypatch.setattr(fcntl, "ioctl", no_reflink)
    calls: list[int] = []
    real_cfr = os.copy_file_range

    def cfr(src: int, dst: int, count: int, *args: Any) -> int:
        calls.append(count)
        if kernel == "exdev":
            raise OSError(errno.EXDEV, "cross-device")
        if kernel == "stops-short":
            return 0
        return real_cfr(src, dst, count, *args)

    monkeypatch.setattr(os, "copy_file_range", cfr)
    r = open_registry(str(tmp_path / "reg"))
    m = r.put(K1, engine_dir)
    r.get(K1, tmp_path / "o")
    for rel in m.files:
        assert (tmp_path / "o" / rel).read_bytes() == (engine_dir / rel).read_bytes()
    assert calls and r.backend.restore_methods == {method}  # type: ignore[attr-defined]
    blob = tmp_path / "reg" / blob_path(m.files["rank0.engine"].digest)
    blob.chmod(0o644)
    blob.write_bytes(b"x" + blob.read_bytes()[1:])
    with pytest.raises(CorruptArtifactError, match="does not match its digest"):
        r.get(K1, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_copy_restore_raises_a_full_disk_instead_of_copying_twice(
    tmp_path: Path, engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import fcntl

    def no_reflink(*args: Any) -> None:
        raise OSError(errno.EOPNOTSUPP, "no reflink")

    def full(*args: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    r = open_registry(str(tmp_path / "reg"))
    r.put(K1, engine_dir)
    monkeypatch.setattr(fcntl, "ioctl", no_reflink)
    monkeypatch.setattr(os, "copy_file_range", full)
    with pytest.raises(OSError) as e:
        r.get(K1, tmp_path / "o")
    assert e.value.errno == errno.ENOSPC
    assert not (tmp_path / "o").exists() and r.backend.restore_methods == set()  # type: ignore[attr-defined]


def test_unknown_scheme_and_bad_hf_url() -> None:
    with pytest.raises(RegistryURLError, match="unknown registry scheme"):
        open_registry("gs://bucket/x")
    with pytest.raises(RegistryURLError):
        open_registry("hf://just-one-part")


def test_unreachable_s3_endpoint_fails_fast(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A refused connection is tried S3_ATTEMPTS times in all, with botocore's capped backoff between the tries,
    then a one-line error: a bounded number of waits, each bounded, counted rather than timed (the waits are
    skipped here, so the test takes no backoff time either)."""
    import botocore.endpoint

    from toolchain.registry.backends import S3_ATTEMPTS

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: refused
    waits: list[float] = []

    class Clock:  # botocore's endpoint sleeps between tries through its module's `time`
        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

        @staticmethod
        def sleep(s: float) -> None:
            waits.append(s)

    monkeypatch.setattr(botocore.endpoint, "time", Clock())
    r = open_registry("s3://nobucket/p")
    with pytest.raises(RegistryUnavailableError, match="cannot reach the S3 endpoint"):
        r.exists(K1)
    assert len(waits) == S3_ATTEMPTS - 1, waits  # the retries of the first try, no more
    assert all(0 <= w <= 20 for w in waits), waits  # botocore's standard mode caps a backoff at 20 s


def test_wrong_bucket_and_credentials(s3_env: str) -> None:
    r = open_registry("s3://does-not-exist/p")
    with pytest.raises(RegistryURLError, match="does not exist"):  # the user's to fix: exit 2, not 75
        r.backend.write_bytes("x", b"1")


def test_hf_backend_boundary(tmp_path: Path, engine_dir: Path) -> None:
    """The Hub backend turns one entry into one commit (blobs + manifest), checked at the API boundary."""
    from toolchain.registry.backends import HFBackend
    from toolchain.registry.store import Registry

    class FakeApi:
        def __init__(self) -> None:
            self.commits: list[list[Any]] = []
            self.files: dict[str, bytes] = {}

        def file_exists(self, repo: str, path: str) -> bool:
            return path in self.files

        def create_commit(self, repo: str, operations: list[Any], commit_message: str) -> None:
            self.commits.append(operations)
            for op in operations:
                src = op.path_or_fileobj
                self.files[op.path_in_repo] = src if isinstance(src, bytes) else Path(src).read_bytes()

    api = FakeApi()
    reg = Registry(HFBackend("org/engines", api=api))
    reg.put(K1, engine_dir)
    assert len(api.commits) == 1
    paths = [op.path_in_repo for op in api.commits[0]]
    assert paths[-1] == f"manifests/{K1}.json" and len(paths) == 4  # 3 unique blobs, manifest last


def test_cache_cli(cli: Cli, tmp_path: Path, engine_dir: Path) -> None:
    reg = str(tmp_path / "reg")
    r = cli("cache", "push", engine_dir, "--key", K1, "--registry", reg)
    assert r.exit_code == 0, r.output
    r = cli("cache", "tag", K1[:12], "prod", "--registry", reg)
    assert r.exit_code == 0, r.output
    r = cli("cache", "ls", "--registry", reg, "--json")
    assert json.loads(r.stdout)["entries"][0]["tags"] == ["prod"]
    r = cli("cache", "pull", "prod", tmp_path / "o", "--registry", reg)
    assert r.exit_code == 0 and (tmp_path / "o" / "rank0.engine").is_file()
    r = cli("cache", "show", "b" * 64, "--registry", reg)
    assert r.exit_code == 2 and f"no entry {'b' * 64} in registry" in r.output
    r = cli("cache", "gc", "--registry", reg, "--yes")
    assert r.exit_code == 0 and "frees 0 B" in r.output
    r = cli("cache", "verify", "--registry", reg)
    assert r.exit_code == 0 and "checked 1 entry, 0 corrupt" in r.output
    r = cli("cache", "ls", "--registry", "ftp://x")
    assert r.exit_code == 2 and "unknown registry scheme" in r.output


def test_push_accepts_the_short_key_and_tag_that_pull_and_tag_accept(
    cli: Cli, tmp_path: Path, engine_dir: Path
) -> None:
    r = cli("cache", "push", engine_dir, "--key", K1)  # into the local default registry (as `build` publishes)
    assert r.exit_code == 0, r.output
    other = str(tmp_path / "other")
    r = cli("cache", "push", engine_dir, "--key", K1[:8], "--registry", other)  # copy under its short key
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == K1
    assert cli("cache", "tag", K1[:8], "prod", "--registry", other).exit_code == 0
    assert cli("cache", "push", engine_dir, "--key", "prod", "--registry", other).stdout.strip() == K1
    r = cli("cache", "push", engine_dir, "--key", "0123abcd", "--registry", other)
    assert r.exit_code == 2 and "names no entry" in r.stderr and "toolchain spec expand" in r.stderr
    assert cli("cache", "ls", "--registry", other, "--json").stdout.count('"key"') == 1  # nothing stored


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["ls"], ["show", "abcdef12"], ["pull", "abcdef12", "OUT"], ["verify"], ["gc", "--yes"], ["tag", "abcdef12", "t"]],
)
def test_read_commands_refuse_a_mistyped_registry_and_create_nothing(cli: Cli, tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "no-such-registry"
    r = cli("cache", *[str(tmp_path / "out") if a == "OUT" else a for a in args], "--registry", missing)
    assert r.exit_code == 2, r.output
    assert "no registry at" in r.output and not missing.exists()


def test_a_push_racing_another_for_one_key_never_overwrites_it(
    tmp_path: Path, engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both pushes checked that the key was free, then both wrote their manifest: the last one silently
    replaced the first (seen as [0, 0, 0, 0] exit codes in the concurrent-push fault test). The manifest is
    now created with link(2), so the second push sees the first and is refused (or agrees, same content)."""
    from toolchain.errors import UserInputError

    other = tmp_path / "other"
    other.mkdir()
    (other / "rank0.engine").write_bytes(b"other content")
    first, second = open_registry(str(tmp_path / "reg")), open_registry(str(tmp_path / "reg"))
    real = first.backend.put_entry

    def interleaved(*args: Any, **kw: Any) -> bool:
        second.put(K1, other)  # the other push wins the race after our key check
        return real(*args, **kw)

    monkeypatch.setattr(first.backend, "put_entry", interleaved)
    with pytest.raises(UserInputError, match=r"already holds entry .* with different content"):
        first.put(K1, engine_dir)
    assert set(first.show(K1).files) == {"rank0.engine"} and first.show(K1).files["rank0.engine"].size == 13
    monkeypatch.setattr(first.backend, "put_entry", real)
    first.put(K1, engine_dir, force=True)  # --force still replaces it
    assert first.show(K1).files.keys() == {
        f.relative_to(engine_dir).as_posix() for f in engine_dir.rglob("*") if f.is_file()
    }
