"""Blobs of an ``oci://`` registry: HEAD, resumable download, chunked (or monolithic) upload sessions.

One rule for trying again, :class:`Tries`: a transfer that breaks (a lost connection, a 5xx on resume, a chunk the
registry did not take) resumes where the registry is, at most as many times as ``toolchain.http``'s policy
(:data:`toolchain.registry.oci.transport.POLICY`) tries a single request, with its backoff between. A request a
transfer resumes from is sent ``resumable``: a lost connection comes back at once as
:class:`~toolchain.registry.oci.transport.Broken`, and the transfer counts it, so no break is counted twice.

An upload session a push leaves unfinished (an error, Ctrl-C) is cancelled (``DELETE <location>``).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from toolchain.errors import CorruptArtifactError, RegistryUnavailableError
from toolchain.registry.oci import transport
from toolchain.registry.oci.transport import RETRY_STATUS, Broken, Transport, oci_error, stalled

CHUNK = 64 * 2**20  # bytes per PATCH of a chunked upload (raised to the registry's OCI-Chunk-Min-Length)
SMALL = 16 * 2**20  # files up to this size are read into memory, hashed, HEADed and sent in one request
READ = 4 * 2**20  # read size while streaming


class Tries:
    """The broken tries of one resumable transfer (a chunked upload, a download; a manifest PUT refused while a
    blob it names is still being committed), under ``toolchain.http``'s policy (the transport's POLICY): as many
    tries in all as a single request gets, with the same backoff before each (``Backoff.allows``/``wait``).

    Counted elsewhere, and never here: the tries ``toolchain.http.send`` makes of one request that is not resumed
    (a HEAD, a manifest GET, the first GET of a download), and the one re-send after a 401 challenge (auth, not
    a failure: ``Transport._request``)."""

    def __init__(self) -> None:
        self.policy = transport.POLICY
        self.broken = 0

    def left(self) -> bool:
        """Whether a break now would still be tried again."""
        return self.policy.allows(self.broken + 1)

    def again(self) -> bool:
        """Count a break; when the policy allows another try, wait its backoff and say so."""
        self.broken += 1
        if not self.policy.allows(self.broken):
            return False
        self.policy.wait(self.broken)
        return True


def stream_errors() -> tuple[type[BaseException], ...]:
    """What a broken download raises mid-stream (and a retryable status on resume)."""
    import httpx

    return (httpx.TransportError, httpx.StreamError, Broken)


class Blobs(Transport):
    """The blob half of the backend: HEAD, GET with resume, upload sessions."""

    meter: Callable[[int], None] | None = None  # Backend's transfer progress (toolchain/registry/backends.py)
    _monolithic = False  # the registry refused a chunked upload: whole-file PUTs from now on

    @staticmethod
    def _digest_of(path: str) -> str | None:
        parts = path.split("/")
        if len(parts) == 4 and parts[0] == "blobs" and parts[1] == "sha256" and re.fullmatch(r"[0-9a-f]{64}", parts[3]):
            return f"sha256:{parts[3]}"
        return None

    def blob_exists(self, digest: str) -> bool:
        resp = self._request("HEAD", f"/blobs/{digest}")
        if resp.status_code == 200:
            return True
        if resp.status_code == 404:
            return False
        raise self._fail(resp, f"HEAD of blob {digest[:19]}")

    # --- upload sessions: one a push leaves unfinished is cancelled (DELETE <location>) -------

    def _open_uploads(self) -> builtins.list[str]:
        """This thread's upload sessions not yet closed by their final PUT: [original location, latest]."""
        tl = self.__dict__.setdefault("_uploads_tl", threading.local())
        if not hasattr(tl, "open"):
            tl.open = []
        sessions: builtins.list[str] = tl.open
        return sessions

    def _track(self, location: str) -> str:
        """``location`` is now where this thread's newest upload session stands (a PATCH or status moved it)."""
        sessions = self._open_uploads()
        if sessions:
            sessions[-1] = location
        return location

    def _cancel_uploads(self) -> None:
        """``DELETE`` every upload session this thread left open (the distribution spec's "Canceling an
        upload"); best effort and short: a registry that refuses or cannot be reached drops them itself."""
        import httpx

        sessions = self._open_uploads()
        while sessions:
            location = sessions.pop()
            ours = httpx.URL(location).netloc == httpx.URL(self.base).netloc
            headers = {"Authorization": self._auth} if self._auth and ours else {}
            with contextlib.suppress(Exception):
                self.client.request("DELETE", location, headers=headers, timeout=min(5.0, self.read_timeout))
                self.requests.append(("DELETE", httpx.URL(location).path))

    def _cancelling(self, upload: Callable[[], Any]) -> Any:
        """Run one blob upload; whatever session it leaves open (an error, Ctrl-C) is cancelled."""
        try:
            return upload()
        finally:
            self._cancel_uploads()

    def _start_upload(self) -> tuple[str, int]:
        # no body, and a session opened twice is dropped by the registry: safe to send again
        resp = self._request("POST", "/blobs/uploads/", push=True, headers={"Content-Length": "0"}, idempotent=True)
        if resp.status_code != 202:
            raise self._fail(resp, f"starting a blob upload to {self.repo}", push=True)
        location = self._location(resp)
        self._open_uploads().append(location)
        return location, int(resp.headers.get("OCI-Chunk-Min-Length") or 0)

    def _finish_upload(self, location: str, digest: str, data: bytes = b"") -> None:
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
        import httpx

        url = str(httpx.URL(location).copy_merge_params({"digest": digest}))  # keeps the session's own query
        resp = self._request("PUT", url, push=True, body=data, headers=headers)
        if resp.status_code not in (201, 204):
            if resp.status_code == 400 and "DIGEST_INVALID" in oci_error(resp):
                raise CorruptArtifactError(
                    f"registry {self.host} received blob bytes that do not hash to {digest}",
                    "a file changed while it was pushed, or the connection corrupted it: push again",
                )
            raise self._fail(resp, f"completing the upload of blob {digest[:19]}", push=True)
        self._open_uploads().pop()  # closed: the blob is in

    def upload_bytes(self, data: bytes, digest: str) -> None:
        def upload() -> None:
            location, _ = self._start_upload()
            self._finish_upload(location, digest, data)

        self._cancelling(upload)

    def upload_stream(self, src: Path) -> tuple[str, int]:
        """:meth:`_upload_stream`; an upload session it leaves open (an error, Ctrl-C) is cancelled."""
        result: tuple[str, int] = self._cancelling(lambda: self._upload_stream(src))
        return result

    def _upload_stream(self, src: Path) -> tuple[str, int]:
        """Send ``src`` as chunks of one upload session, hashing each byte as it is sent (one read);
        a lost chunk resumes where the registry's upload status says it stopped. A registry that refuses
        chunked uploads (its first ``PATCH`` answered 400/405/501) gets a monolithic ``PUT`` instead: the
        file is hashed first, then streamed (two reads). Returns (digest, size)."""
        if self._monolithic:
            return self._upload_monolithic(src)
        location, min_chunk = self._start_upload()
        chunk = max(CHUNK, min_chunk)
        h = hashlib.sha256()
        hashed = 0  # bytes of the file fed to the hash (a resent chunk is not hashed twice)
        with open(src, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset, tries = 0, Tries()
            while offset < size:
                start, n = offset, min(chunk, size - offset)

                def body(start: int = start, n: int = n) -> Iterator[bytes]:
                    nonlocal hashed
                    f.seek(start)
                    pos, left = start, n
                    while left:
                        b = f.read(min(left, READ))
                        if not b:
                            raise CorruptArtifactError(f"{src} shrank while it was being pushed", None)
                        if pos + len(b) > hashed:
                            new = b[hashed - pos :] if hashed > pos else b
                            h.update(new)
                            hashed = pos + len(b)
                            if self.meter is not None:
                                self.meter(len(new))
                        pos += len(b)
                        left -= len(b)
                        yield b

                headers = {
                    "Content-Type": "application/octet-stream",
                    "Content-Range": f"{start}-{start + n - 1}",
                    "Content-Length": str(n),
                }
                try:
                    resp = self._request("PATCH", location, push=True, body=body, headers=headers, resumable=True)
                    status = resp.status_code
                except Broken:
                    status = 0
                if status == 202:
                    location = self._track(self._location(resp))
                    offset = start + n
                    continue
                if status in (400, 405, 501) and start == 0 and hashed <= n:
                    self._monolithic = True  # no chunked uploads here: this session is dropped by the registry
                    return self._upload_monolithic(src)
                if status not in (0, 416, *RETRY_STATUS):
                    raise self._fail(resp, f"uploading {src.name} (bytes {start}-{start + n - 1})", push=True)
                if not tries.again():
                    if status == 0:
                        raise RegistryUnavailableError(
                            f"the upload of {src.name} to registry {self.host} broke {tries.broken} times",
                            "check the network (or the registry's proxy body-size limits), then push again",
                        )
                    raise self._fail(resp, f"uploading {src.name}", push=True)
                location, offset = self._upload_status(location)
                self._track(location)
                if offset < 0:  # the session cannot go on (distribution: stale state after a partial chunk)
                    location, _ = self._start_upload()  # a new one from byte 0; nothing is hashed twice
                    offset = 0
            if hashed != size or os.fstat(f.fileno()).st_size != size:
                raise CorruptArtifactError(f"{src} changed size while it was being pushed", None)
        digest = "sha256:" + h.hexdigest()
        self._finish_upload(location, digest)
        return digest, size

    def _upload_monolithic(self, src: Path) -> tuple[str, int]:
        """Hash ``src``, then send it as the body of the closing ``PUT`` (streamed from the file)."""
        from toolchain.digest import hash_file

        digest = hash_file(src, "sha256")
        size = src.stat().st_size

        def body() -> Iterator[bytes]:
            with open(src, "rb") as f:
                sent = 0
                while b := f.read(READ):
                    sent += len(b)
                    if self.meter is not None:
                        self.meter(len(b))
                    yield b
            if sent != size:
                raise CorruptArtifactError(f"{src} changed size while it was being pushed", None)

        if self.blob_exists(digest):  # the digest is known before sending here: HEAD skips it
            if self.meter is not None:
                self.meter(size)
            return digest, size
        import httpx

        location, _ = self._start_upload()
        url = str(httpx.URL(location).copy_merge_params({"digest": digest}))
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        resp = self._request("PUT", url, push=True, body=body, headers=headers)
        if resp.status_code not in (201, 204):
            raise self._fail(resp, f"uploading {src.name} in one request", push=True)
        self._open_uploads().pop()  # closed: the blob is in
        return digest, size

    def _upload_status(self, location: str) -> tuple[str, int]:
        """Where an upload session stands: (its location, the next byte it expects); -1: it cannot go on."""
        try:
            resp = self._request("GET", location, push=True)
        except RegistryUnavailableError:
            return location, -1
        if resp.status_code in (400, 404, 416):
            return location, -1
        if resp.status_code not in (202, 204):
            raise self._fail(resp, "asking the status of an upload", push=True)
        m = re.fullmatch(r"(?:bytes=)?0-(\d+)", resp.headers.get("Range", "").strip())
        nxt = int(m.group(1)) + 1 if m else 0
        return (self._location(resp) if resp.headers.get("Location") else location), nxt

    def download(self, digest: str, dest: Path) -> str:
        """GET a blob into ``dest`` (a new file), hashing as it lands; a broken stream resumes with
        ``Range: bytes=N-``. Returns the digest of what was written."""
        h = hashlib.sha256()
        written, tries = 0, Tries()
        with open(dest, "wb") as out:
            while True:
                headers = {"Range": f"bytes={written}-"} if written else {}
                try:
                    resp = self._request(
                        "GET", f"/blobs/{digest}", headers=headers, stream=True, resumable=bool(written)
                    )
                except Broken:
                    resp = None
                if resp is not None:
                    try:
                        if resp.status_code == 404:
                            raise FileNotFoundError(digest)
                        if written and resp.status_code == 206:
                            start = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
                            if not start or int(start.group(1)) != written:
                                out.seek(0)
                                out.truncate()
                                h, written = hashlib.sha256(), 0
                        elif resp.status_code == 200:
                            if written:  # the registry ignored Range: start again
                                out.seek(0)
                                out.truncate()
                                h, written = hashlib.sha256(), 0
                        elif written and resp.status_code in RETRY_STATUS and tries.left():
                            raise Broken(f"{resp.status_code} on resume")
                        else:
                            resp.read()
                            raise self._fail(resp, f"GET of blob {digest[:19]}")
                        # raw bytes unless the response is content-encoded (the blob is what is hashed);
                        # httpx's re-chunking of iter_bytes costs ~2x the time on large blobs
                        chunks = resp.iter_bytes() if resp.headers.get("Content-Encoding") else resp.iter_raw()
                        with self.waiting_on(f"GET blob {digest[7:19]}") as came:
                            for b in chunks:
                                came()
                                out.write(b)
                                h.update(b)
                                written += len(b)
                                if self.meter is not None:
                                    self.meter(len(b))
                        return "sha256:" + h.hexdigest()
                    except stream_errors() as e:
                        if stalled(e) or not tries.left():  # a stall is named at once, never resumed
                            raise self._unreachable(e) from e
                    finally:
                        resp.close()
                if not tries.again():
                    raise RegistryUnavailableError(
                        f"the download of blob {digest[:19]} from registry {self.host} broke {tries.broken} times",
                        "check the network, then pull again",
                    )
