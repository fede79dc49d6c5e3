"""Storage backends of the registry: a local directory, S3 (boto3), Hugging Face Hub.

All speak the same small object-store interface with '/'-separated paths. Every write is
visible only when complete: local writes go to a temp name and are renamed; S3 PUTs are atomic
per object; the Hub commits a whole entry in one commit.

Every network backend waits with deadlines from ``toolchain.settings.http_timeouts``
(``TOOLCHAIN_HTTP_CONNECT_TIMEOUT``, ``TOOLCHAIN_HTTP_READ_TIMEOUT``; docs/oci-registry.md, "Deadlines"): botocore's
``connect_timeout``/``read_timeout`` (standard retry mode, 5 tries in all) for S3, its reads capped by
``TOOLCHAIN_S3_STALL_TIMEOUT`` and a stall not retried; for the Hub, huggingface_hub's shared client as
``toolchain.hub`` makes it (reads capped by ``TOOLCHAIN_HF_STALL_TIMEOUT``, a stall named at once).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from toolchain import http, settings
from toolchain.digest import hash_file, hash_file_as, staged_file, write_all
from toolchain.errors import (
    CorruptArtifactError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    RegistryURLError,
    UserInputError,
)
from toolchain.waits import Waits, what_of

FICLONE = 0x40049409  # linux/fs.h: reflink a whole file
S3_ATTEMPTS = 5  # botocore's standard retry mode: the first try and four retries (total_max_attempts)
# S3 error codes that say "not now" rather than "never" (exit 75): throttling and the service's own failures
S3_TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable", "InternalError", "503"}
)


def _words(e: BaseException) -> str:
    """A library's exception as words for an error line: its message, else its class name split into words."""
    import re

    text = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
    return text or re.sub(r"(?<!^)(?=[A-Z])", " ", type(e).__name__).lower()


def _unavailable_or_error(e: BaseException, message: str) -> RegistryError:
    """The Hub registry's failure: transient (exit 75) when the Hub could not be reached or answered 429/5xx."""
    from toolchain import hub

    kind = RegistryUnavailableError if http.transient(e) else RegistryError
    return kind(f"{message}: {hub.stopped_message(e) or _words(e)}")


def http_deadlines() -> tuple[float, float]:
    """(connect, read) seconds for a network backend (S3, the Hub): toolchain/http.py's, so every client waits
    alike; a bad setting is the user's to fix (exit 2)."""
    from toolchain import http

    return http.timeouts()


class Backend:
    url: str
    locks = False  # whether lock() excludes gc from pushes (else gc relies on its grace period)
    # Transfer progress: called with a byte count as data moves. Backends that stream (S3) call it while a
    # file moves; for the others the registry counts whole files.
    meter: Callable[[int], None] | None = None
    streams_bytes = False
    ingest_meters = False  # ingest() calls meter for every byte it reads (it uploads while it hashes)
    lists_cheaply = False  # one listing of manifests/ is cheaper than a request per key, however many are asked
    digest_algo: str | None = None  # the only digest the store holds (OCI: sha256); None: the fastest there is
    gc_note: str | None = None  # what gc cannot do on this store, and who does it instead

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, path: str, src: Path, digest: str) -> None:
        raise NotImplementedError

    def get_file(self, path: str, dest: Path) -> str | None:
        """Write the object at ``path`` to the new file ``dest``; return the digest of what was written when
        it was hashed on the way (None: the caller hashes the file)."""
        raise NotImplementedError

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        raise NotImplementedError

    def unlisted(self) -> tuple[tuple[str, str], ...]:
        """What the last listing of ``manifests/`` left out, each as (name, why): on OCI, tags of manifests
        it could not read. The other stores list every manifest file."""
        return ()

    def delete(self, path: str) -> None:
        raise NotImplementedError

    def local_path(self, path: str) -> Path | None:
        return None

    def lock(self, *, exclusive: bool, timeout: float | None = None) -> contextlib.AbstractContextManager[None]:
        """Push holds the store shared, gc exclusive (backends without locks rely on gc's grace period)."""
        return contextlib.nullcontext()

    def restore(self, path: str, dest: Path, digest: str, *, link: bool) -> str:
        """Local backends: put the blob's bytes at ``dest`` and return the digest of what was put there."""
        raise NotImplementedError

    def touch(self, path: str) -> None:
        """Mark an existing object as just used, so gc's grace period keeps it through a push that reuses it."""

    def mtime(self, path: str) -> float | None:
        """Last-modified time of an object, or None when it is gone."""
        raise NotImplementedError

    def stale_uploads(self, older_than_s: float) -> builtins.list[tuple[str, str]]:
        """Unfinished multipart uploads started more than ``older_than_s`` ago: (key, upload id)."""
        return []

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise NotImplementedError

    def ingest(
        self, src: Path, algo: str, path_of: Callable[[str], str], also: dict[str, str] | None = None
    ) -> str | None:
        """Store ``src`` in the same read that hashes it and return the digest; None where the
        digest is needed before the upload (remote stores: ``put_file`` then sends the bytes). ``also``: a
        dict whose keys name more algorithms to hash in that read; their digests are filled in."""
        return None

    def put_entry(
        self, blobs: builtins.list[tuple[str, Path, str]], manifest_path: str, manifest: bytes, *, replace: bool = True
    ) -> bool:
        """Blobs first (in parallel), the manifest last: the entry appears only when complete. Without
        ``replace`` the manifest is only created, never written over (False: another push got there first)."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            for f, src in [(pool.submit(self.put_file, p, src, d), src) for p, src, d in blobs]:
                f.result()
                if self.meter is not None and not self.streams_bytes:
                    self.meter(src.stat().st_size)
        if replace:
            self.write_bytes(manifest_path, manifest)
            return True
        return self.write_new(manifest_path, manifest)

    def write_new(self, path: str, data: bytes) -> bool:
        """Create ``path`` unless it exists (False then). Remote stores check first (a narrow race remains)."""
        if self.exists(path):
            return False
        self.write_bytes(path, data)
        return True


# --- local -------------------------------------------------------------------------------------


def restore_verified(src: Path, dst: Path, digest: str, *, link: bool) -> tuple[str, str]:
    """Put ``src``'s bytes at ``dst`` and hash what was put there; returns (digest found, method).

    Default: an independent copy (a reflink where the file system shares blocks copy-on-write, else a
    kernel copy hashed after it lands, else a copy hashed on the way), so writing into a pulled file
    never changes the registry. ``link``: a
    hardlink to the read-only blob (fast, shared with the store), after hashing the blob itself.
    """
    algo = digest.split(":", 1)[0]
    if link:
        got = hash_file(src, algo)
        if got != digest:
            return got, "hardlink"
        try:
            os.link(src, dst)
            return got, "hardlink"
        except OSError:
            pass
    try:
        with open(src, "rb") as s, open(dst, "wb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        return hash_file(dst, algo), "reflink"
    except OSError:
        with contextlib.suppress(OSError):
            dst.unlink()
    try:
        if kernel_copy(src, dst):  # the kernel moved the bytes; hash what landed, on every core
            got = hash_file(dst, algo)
            if got == digest:
                return got, "kernel-copy"
        # a short copy, or one that does not hash right: the copy is suspect, not the blob; try the plain way
    except OSError as e:
        if e.errno not in COPY_UNSUPPORTED:
            with contextlib.suppress(OSError):
                dst.unlink()
            raise
    with contextlib.suppress(OSError):
        dst.unlink()
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        got = hash_file(src, algo, sink=fd)  # no copy_file_range here: read, hash and write in one pass
    finally:
        os.close(fd)
    return got, "copy"


# copy_file_range(2) errors that mean "not here" (another file system, an old kernel, a special file):
# fall back to reading and writing. Others (ENOSPC, EIO, EDQUOT) would fail the fallback too: raised.
COPY_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM}


def kernel_copy(src: Path, dst: Path) -> bool:
    """Copy ``src`` to a new file ``dst`` with copy_file_range(2): no user-space buffer (and block sharing
    where the file system offers it). False when the kernel stopped short (some file systems return 0
    for what they do not support); raises OSError where the call fails."""
    with open(src, "rb") as s:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            left = os.fstat(s.fileno()).st_size
            while left > 0:
                n = os.copy_file_range(s.fileno(), fd, min(left, 1 << 30))
                if n == 0:
                    return False
                left -= n
            return True
        finally:
            os.close(fd)


class LocalBackend(Backend):
    locks = True

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.url = str(self.root)
        self.restore_methods: set[str] = set()  # how files were restored: reflink, hardlink, kernel-copy or copy
        self._lock_fd: int | None = None
        self._lock_depth = 0
        try:
            (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RegistryError(
                f"cannot create registry at {self.root}: {e.strerror}", "pass --registry with a writable directory"
            ) from e

    def _p(self, path: str) -> Path:
        return self.root / path

    def local_path(self, path: str) -> Path:
        return self._p(path)

    def exists(self, path: str) -> bool:
        return self._p(path).is_file()

    def read_bytes(self, path: str) -> bytes:
        return self._p(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        with staged_file(self._p(path), tmp_dir=self.root / "tmp") as fd:
            write_all(fd, data)

    def write_new(self, path: str, data: bytes) -> bool:
        """Create ``path`` atomically unless it exists (``staged_file(exclusive=True)``): of two pushes
        racing for one key exactly one wins."""
        try:
            with staged_file(self._p(path), tmp_dir=self.root / "tmp", exclusive=True) as fd:
                write_all(fd, data)
        except FileExistsError:
            return False
        return True

    def put_file(self, path: str, src: Path, digest: str) -> None:
        dst = self._p(path)
        if dst.is_file():
            self.touch(path)  # content-addressed: already there; young again for gc's grace period
            return
        with staged_file(dst, tmp_dir=self.root / "tmp", mode=0o444) as fd:
            got = hash_file(src, digest.split(":", 1)[0], sink=fd)
            if got != digest:
                raise CorruptArtifactError(
                    f"{src} changed while it was being stored ({got} != {digest})",
                    "make sure nothing writes to the directory during push",
                )

    def ingest(self, src: Path, algo: str, path_of: Callable[[str], str], also: dict[str, str] | None = None) -> str:
        """Store ``src`` as a blob in one read: copied into ``tmp/`` while it is hashed, then renamed
        to ``path_of(digest)`` (dropped when that blob is already there). Returns the digest; ``also``'s
        algorithms are hashed in the same read."""
        fd, tmp = tempfile.mkstemp(prefix=".ingest.", suffix=".tmp", dir=self.root / "tmp")
        try:
            try:
                if also:
                    digests = hash_file_as(src, (algo, *also), sink=fd)
                    also.update({a: digests[a] for a in also})
                    digest = digests[algo]
                else:
                    digest = hash_file(src, algo, sink=fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            dst = self._p(path_of(digest))
            if not dst.is_file():
                os.chmod(tmp, 0o444)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, dst)
            return digest
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def get_file(self, path: str, dest: Path) -> None:
        shutil.copyfile(self._p(path), dest)

    def restore(self, path: str, dest: Path, digest: str, *, link: bool) -> str:
        got, method = restore_verified(self._p(path), dest, digest, link=link)
        self.restore_methods.add(method)
        return got

    @contextlib.contextmanager
    def lock(self, *, exclusive: bool, timeout: float | None = None) -> Iterator[None]:
        """flock on ``<root>/lock``: pushes share it, gc takes it alone, so gc never runs during a push."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, op | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if deadline is not None and time.monotonic() > deadline:
                        raise RegistryError(
                            f"{self.url} is busy ({'a push is' if exclusive else 'gc is'} running)",
                            "wait for it to finish, then run the command again",
                        ) from exc
                    time.sleep(0.05)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            os.close(fd)  # closing drops the flock

    def touch(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.utime(self._p(path))

    def mtime(self, path: str) -> float | None:
        try:
            return self._p(path).stat().st_mtime
        except FileNotFoundError:
            return None

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        base = self._p(prefix)
        if not base.exists():
            return
        for dirpath, _, files in os.walk(base):
            for name in files:
                p = Path(dirpath) / name
                with contextlib.suppress(FileNotFoundError):
                    st = p.stat()
                    yield p.relative_to(self.root).as_posix(), st.st_size, st.st_mtime

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._p(path).unlink()


# --- S3 ----------------------------------------------------------------------------------------


class _S3Stalled(Exception):
    """An S3 read that timed out: the endpoint stopped answering. Neither botocore's retries nor s3transfer's
    download retries know this type, so a stall ends the request at once instead of being waited out again."""


class S3Backend(Backend, Waits):
    """s3://bucket/prefix; endpoint from TOOLCHAIN_S3_ENDPOINT_URL or AWS_ENDPOINT_URL (S3-compatible stores).

    A read that times out (nothing for ``TOOLCHAIN_S3_STALL_TIMEOUT``, at most the read timeout) is not retried:
    the request ends with ``S3 endpoint HOST stopped answering`` (exit 75). Connection failures, throttling and
    5xx answers are retried by botocore (standard mode). While a request has had nothing for a few seconds the
    backend says so through ``waiting`` (the ``ReportsWaits`` capability).
    """

    def __init__(self, bucket: str, prefix: str, endpoint_url: str | None = None) -> None:
        import threading
        import urllib.parse

        from toolchain._deps import require

        boto3 = require("boto3", "s3")
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        endpoint = endpoint_url or settings.s3_endpoint_url()
        self.connect_timeout, read = http_deadlines()
        try:
            stall = settings.s3_stall_timeout()
        except ValueError as e:
            raise UserInputError(str(e), "set it to seconds, e.g. 20 (or unset it for the default)") from e
        self.read_timeout = min(read, stall)  # the longest silence before the endpoint is named stopped
        self.deadline_setting = "TOOLCHAIN_S3_STALL_TIMEOUT" if stall < read else "TOOLCHAIN_HTTP_READ_TIMEOUT"
        cfg = Config(
            retries={"total_max_attempts": S3_ATTEMPTS, "mode": "standard"},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_pool_connections=16,
        )
        self.s3 = boto3.client("s3", endpoint_url=endpoint, config=cfg)
        self.host = urllib.parse.urlsplit(self.s3.meta.endpoint_url).netloc or str(self.s3.meta.endpoint_url)
        events = self.s3.meta.events
        events.register_first("needs-retry.s3", _no_retry_of_stalls)
        events.register("after-call.s3.GetObject", _stall_aware_body)
        from boto3.s3.transfer import TransferConfig

        self.transfer = TransferConfig(
            multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=8, use_threads=True
        )
        self.waiting: Callable[[str], None] | None = None  # the ReportsWaits capability (registry/capabilities.py)
        self._lock = threading.Lock()
        self._inflight: dict[int, tuple[str, float]] = {}
        self._watching = False

    def _k(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _stopped(self) -> RegistryUnavailableError:
        return RegistryUnavailableError(
            f"S3 endpoint {self.host} stopped answering for {self.url} (nothing for {self.read_timeout:g} s); "
            f"raise {self.deadline_setting} if it is only slow",
            "check the endpoint's health and the network, then try again",
        )

    def _call(self, fn: Any, *args: Any, what: str | None = None, **kw: Any) -> Any:
        """``fn(*args, **kw)`` with botocore's failures as the registry's one-line errors; ``what`` (for the lines
        that say what is awaited) is e.g. ``GET blob``."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )
        from s3transfer.exceptions import RetriesExceededError

        try:
            with self.waiting_on(what or str(getattr(fn, "__name__", "request"))) as came:
                if "Callback" in kw:  # a transfer: each chunk moved says the endpoint still answers
                    meter = kw["Callback"]

                    def moved(n: int) -> None:
                        came()
                        if meter is not None:
                            meter(n)

                    kw["Callback"] = moved
                return fn(*args, **kw)
        except RetriesExceededError as e:  # a download that kept breaking mid-object: s3transfer's tries are spent
            cause = e.last_exception
            if isinstance(cause, (_S3Stalled, ReadTimeoutError)):
                raise self._stopped() from e
            raise RegistryUnavailableError(f"S3 download from {self.url} broke: {_words(cause or e)}") from e
        except (_S3Stalled, ReadTimeoutError) as e:
            raise self._stopped() from e
        except ConnectTimeoutError as e:
            raise RegistryUnavailableError(
                f"cannot connect to the S3 endpoint for {self.url} (no answer to connect within "
                f"{self.connect_timeout:g} s, {S3_ATTEMPTS} tries); raise TOOLCHAIN_HTTP_CONNECT_TIMEOUT if the "
                "network is only slow",
                "check TOOLCHAIN_S3_ENDPOINT_URL / AWS_ENDPOINT_URL and the network",
            ) from e
        except EndpointConnectionError as e:
            raise RegistryUnavailableError(
                f"cannot reach the S3 endpoint for {self.url} ({e.kwargs.get('endpoint_url')})"
            ) from e
        except NoCredentialsError as exc:
            raise RegistryAuthError(
                f"no AWS credentials for {self.url}", "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
            ) from exc
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(args[0] if args else "") from e
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
                raise RegistryAuthError(
                    f"S3 refused the credentials for {self.url} ({code})",
                    "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
                ) from e
            if code == "NoSuchBucket":
                raise RegistryURLError(
                    f"bucket {self.bucket} does not exist", "create it or fix the registry URL"
                ) from e
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in S3_TRANSIENT_CODES or (isinstance(status, int) and (status == 429 or status >= 500)):
                raise RegistryUnavailableError(
                    f"S3 answered {code or status} on {self.url} after {S3_ATTEMPTS} tries",
                    "the endpoint is failing or throttling: try again later",
                ) from e
            raise RegistryError(f"S3 error on {self.url}: {code}") from e
        except BotoCoreError as e:
            kind = RegistryUnavailableError if http.transient(e) else RegistryError
            raise kind(f"S3 failure on {self.url}: {_words(e)}") from e

    def exists(self, path: str) -> bool:
        try:
            self._call(self.s3.head_object, Bucket=self.bucket, Key=self._k(path), what=_what("HEAD", path))
            return True
        except FileNotFoundError:
            return False

    def read_bytes(self, path: str) -> bytes:
        def get() -> bytes:
            resp = self.s3.get_object(Bucket=self.bucket, Key=self._k(path))
            return bytes(resp["Body"].read())

        try:
            data: bytes = self._call(get, what=_what("GET", path))
        except FileNotFoundError as e:
            raise FileNotFoundError(path) from e
        return data

    def write_bytes(self, path: str, data: bytes) -> None:
        self._call(self.s3.put_object, Bucket=self.bucket, Key=self._k(path), Body=data, what=_what("PUT", path))

    streams_bytes = True

    def put_file(self, path: str, src: Path, digest: str) -> None:
        if self.exists(path):
            self.touch(path)
            if self.meter is not None:
                self.meter(src.stat().st_size)
            return
        self._call(
            self.s3.upload_file,
            str(src),
            self.bucket,
            self._k(path),
            Config=self.transfer,
            Callback=self.meter,
            what=_what("PUT", path),
        )

    def get_file(self, path: str, dest: Path) -> None:
        self._call(
            self.s3.download_file,
            self.bucket,
            self._k(path),
            str(dest),
            Config=self.transfer,
            Callback=self.meter,
            what=_what("GET", path),
        )

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        pag = self.s3.get_paginator("list_objects_v2")
        strip = len(self.prefix) + 1 if self.prefix else 0
        pages = self._call(
            lambda: list(pag.paginate(Bucket=self.bucket, Prefix=self._k(prefix))), what=_what("LIST", prefix)
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"][strip:], int(obj["Size"]), obj["LastModified"].timestamp()

    def delete(self, path: str) -> None:
        self._call(self.s3.delete_object, Bucket=self.bucket, Key=self._k(path), what=_what("DELETE", path))

    def touch(self, path: str) -> None:
        """Copy the object onto itself: S3 has no utime, and a copy refreshes LastModified server-side."""
        key = self._k(path)
        with contextlib.suppress(FileNotFoundError):
            self._call(
                self.s3.copy_object,
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                MetadataDirective="REPLACE",
                what=_what("COPY", path),
            )

    def mtime(self, path: str) -> float | None:
        try:
            head = self._call(self.s3.head_object, Bucket=self.bucket, Key=self._k(path), what=_what("HEAD", path))
        except FileNotFoundError:
            return None
        return float(head["LastModified"].timestamp())

    def stale_uploads(self, older_than_s: float) -> builtins.list[tuple[str, str]]:
        out = []
        prefix = f"{self.prefix}/" if self.prefix else ""
        now = time.time()
        kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            resp = self._call(self.s3.list_multipart_uploads, **kw, what="LIST uploads")
            for u in resp.get("Uploads", []):
                if now - u["Initiated"].timestamp() >= older_than_s:
                    out.append((str(u["Key"]), str(u["UploadId"])))
            if not resp.get("IsTruncated"):
                return out
            kw["KeyMarker"], kw["UploadIdMarker"] = resp.get("NextKeyMarker"), resp.get("NextUploadIdMarker")

    def abort_upload(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call(
                self.s3.abort_multipart_upload, Bucket=self.bucket, Key=key, UploadId=upload_id, what="DELETE upload"
            )


def _what(method: str, path: str) -> str:
    """An S3 request in a few words, for the lines that say what is awaited: ``GET blob``, ``HEAD manifest``."""
    return what_of(method, "/" + path)


def _no_retry_of_stalls(caught_exception: BaseException | None = None, **_: Any) -> None:
    """botocore's ``needs-retry`` hook, run before its retry handler: a read that timed out ends the request."""
    from botocore.exceptions import ReadTimeoutError

    if isinstance(caught_exception, ReadTimeoutError):
        raise _S3Stalled(str(caught_exception)) from caught_exception


def _stall_aware_body(parsed: dict[str, Any] | None = None, **_: Any) -> None:
    """botocore's ``after-call`` hook of GetObject: a body read that times out raises :class:`_S3Stalled`, which
    s3transfer does not retry (its download retries would wait the deadline out again)."""
    from botocore.exceptions import ReadTimeoutError

    body = (parsed or {}).get("Body")
    if body is None or not hasattr(body, "read"):
        return
    read = body.read

    def stall_aware_read(amt: int | None = None) -> bytes:
        try:
            data: bytes = read(amt)
        except ReadTimeoutError as e:
            raise _S3Stalled(str(e)) from e
        return data

    body.read = stall_aware_read


# --- Hugging Face Hub --------------------------------------------------------------------------


class HFBackend(Backend):
    """hf://org/repo: a model repo on the Hub; an entry is one commit (blobs + manifest together)."""

    def __init__(self, repo_id: str, api: Any = None) -> None:
        if api is None:
            from toolchain._deps import require

            hub = require("huggingface_hub", "hf")
            api = hub.HfApi()  # token from HF_TOKEN / the standard login, never printed
        from toolchain import hub

        self.connect_timeout, self.read_timeout, _ = hub.deadlines()  # the read: TOOLCHAIN_HF_STALL_TIMEOUT at most
        if type(api).__module__.startswith("huggingface_hub"):  # not a stand-in a test passed
            hub.install()  # huggingface_hub's shared client: these deadlines, a stall named (toolchain/hub.py)
        self.api = api
        self.repo_id = repo_id
        self.url = f"hf://{repo_id}"

    def exists(self, path: str) -> bool:
        return bool(self.api.file_exists(self.repo_id, path))

    def read_bytes(self, path: str) -> bytes:
        # A manifest or signature can be replaced (push --force): it is read from the Hub every time. Without
        # force_download, huggingface_hub answers a failed HEAD with the copy it cached earlier
        # (huggingface_hub/file_download.py, _hf_hub_download_to_cache_dir, 1.x), so an unreachable Hub would
        # serve, and `deploy` pin, a superseded record. A blob is named by its digest: its cached copy is it.
        fresh = not path.startswith("blobs/")
        try:
            local = self.api.hf_hub_download(self.repo_id, path, etag_timeout=self.read_timeout, force_download=fresh)
        except Exception as e:
            if type(e).__name__ in ("EntryNotFoundError", "RemoteEntryNotFoundError"):
                raise FileNotFoundError(path) from e
            raise _unavailable_or_error(e, f"cannot read {path} from {self.url}") from e
        return Path(local).read_bytes()

    def _commit(self, ops: list[Any], message: str) -> None:
        try:
            self.api.create_commit(self.repo_id, operations=ops, commit_message=message)
        except Exception as e:
            raise _unavailable_or_error(e, f"commit to {self.url} failed") from e

    def write_bytes(self, path: str, data: bytes) -> None:
        from huggingface_hub import CommitOperationAdd

        self._commit([CommitOperationAdd(path_in_repo=path, path_or_fileobj=data)], f"toolchain: write {path}")

    def put_file(self, path: str, src: Path, digest: str) -> None:
        from huggingface_hub import CommitOperationAdd

        self._commit([CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(src))], f"toolchain: blob {digest}")

    def put_entry(
        self, blobs: builtins.list[tuple[str, Path, str]], manifest_path: str, manifest: bytes, *, replace: bool = True
    ) -> bool:
        from huggingface_hub import CommitOperationAdd

        if not replace and self.exists(manifest_path):
            return False

        ops = [
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(src)) for p, src, _ in blobs if not self.exists(p)
        ]
        ops.append(CommitOperationAdd(path_in_repo=manifest_path, path_or_fileobj=manifest))
        self._commit(ops, f"toolchain: entry {manifest_path}")
        return True

    def get_file(self, path: str, dest: Path) -> None:
        try:
            local = self.api.hf_hub_download(self.repo_id, path, etag_timeout=self.read_timeout)
        except Exception as e:
            if type(e).__name__ in ("EntryNotFoundError", "RemoteEntryNotFoundError"):
                raise FileNotFoundError(path) from e
            raise _unavailable_or_error(e, f"cannot read {path} from {self.url}") from e
        shutil.copyfile(local, dest)

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        try:
            items = self.api.list_repo_tree(self.repo_id, path_in_repo=prefix.rstrip("/"), recursive=True)
            for it in items:
                if hasattr(it, "size"):
                    # the Hub gives no per-file time; an entry is one atomic commit, so no grace is needed
                    yield it.path, int(it.size or 0), 0.0
        except Exception as e:
            if type(e).__name__ in ("EntryNotFoundError", "RemoteEntryNotFoundError"):
                return
            raise _unavailable_or_error(e, f"cannot list {self.url}") from e

    def mtime(self, path: str) -> float | None:
        return 0.0 if self.exists(path) else None

    def delete(self, path: str) -> None:
        from huggingface_hub import CommitOperationDelete

        self._commit([CommitOperationDelete(path_in_repo=path)], f"toolchain: delete {path}")
