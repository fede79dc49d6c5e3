"""``oci://host[:port]/repository``: the engine registry in an OCI registry, over the distribution API.

The registry's object paths map onto OCI as follows (docs/oci-registry.md has the layout and its sources):

    blobs/sha256/<hh>/<hex>   the blob ``sha256:<hex>`` of the repository (HEAD, GET with Range, chunked upload)
    manifests/<key>.json      the image manifest tagged ``<key>``, read back as the registry's entry manifest;
                              an artifact another client pushed is also found by its manifest digest
    refs/tags/<name>          the OCI tag ``<name>``: a manifest with the entry's layers and ``dev.toolchain.tag``

Only sha256 blobs exist here, so entries in an OCI registry are hashed with sha256. A push streams each file
to an upload session in chunks while it hashes them (one read) and closes the session with the digest; a
file small enough to hold in memory is hashed first, so a blob the registry has is never sent. The manifest
is written last, so a tag appears only for a complete entry.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from toolchain import http, redact, settings
from toolchain.digest import canonical_json, sha256_text
from toolchain.errors import (
    CorruptArtifactError,
    ManifestError,
    RegistryAuthError,
    RegistryError,
    RegistryPlainHTTPError,
    RegistryUnavailableError,
    RegistryURLError,
)
from toolchain.registry.backends import Backend
from toolchain.registry.manifest import KEY_RE, TAG_RE, check_against_record, parse_manifest
from toolchain.registry.oci_auth import (
    DOCKER_HUB_HOSTS,
    Credentials,
    anonymous_refused,
    fetch_token,
    lookup_credentials,
    parse_challenge,
)

MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_MT = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MTS = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
ARTIFACT_TYPE = "application/vnd.toolchain.engine.v1"
FILE_MT = "application/vnd.toolchain.engine.file.v1"
RECORD_MT = "application/vnd.toolchain.record.v1+json"  # the toolchain's own record of an entry: the config blob
EMPTY_DATA = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_DATA).hexdigest()
EMPTY: dict[str, Any] = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": EMPTY_DIGEST,
    "size": len(EMPTY_DATA),
}
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
A_KEY = "dev.toolchain.key"
A_CONTENT = "dev.toolchain.content"
A_KIND = "dev.toolchain.kind"
A_SCHEMA = "dev.toolchain.schema"
A_PROVENANCE = "dev.toolchain.provenance"
A_TAG = "dev.toolchain.tag"
A_EXEC = "dev.toolchain.executable"
A_RECORD = "dev.toolchain.record"
ORAS_UNPACK = "io.deis.oras.content.unpack"

CHUNK = 64 * 2**20  # bytes per PATCH of a chunked upload (raised to the registry's OCI-Chunk-Min-Length)
SMALL = 16 * 2**20  # files up to this size are read into memory, hashed, HEADed and sent in one request
READ = 4 * 2**20  # read size while streaming
MAX_MANIFEST = 4 * 2**20  # distribution's default manifest size limit
# toolchain/http.py's policy: per request on 429/5xx/connection errors (idempotent requests; a PATCH whose bytes
# went out is resumed from the upload's status instead), and per chunk/download on a broken stream
POLICY = http.DEFAULT
RETRIES = POLICY.attempts - 1  # tries after the first
RETRY_STATUS = http.RETRY_STATUS
REGISTRY_ERRORS = http.Kinds(
    auth=RegistryAuthError, missing=RegistryError, unavailable=RegistryUnavailableError, other=RegistryError
)

# distribution-spec v1.1.1: repository name components and tags
REPO_RE = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
HOST_RE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)
OCI_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
# cosign's tag-based discovery (specs/SIGNATURE_SPEC.md): signatures, attestations and SBOMs of a manifest
# digest; they are not entries or toolchain tags (docs/signing.md)
COSIGN_TAG_RE = re.compile(r"sha256-[0-9a-f]{64}\.(?:sig|att|sbom)")
SIG_CONFIG_MT = "application/vnd.oci.image.config.v1+json"

GC_NOTE = (
    "an OCI registry has no listing of blobs: unreferenced blobs (a killed push's, a deleted entry's) are "
    "reclaimed by the registry's own garbage collector (distribution: `registry garbage-collect "
    "--delete-untagged CONFIG`; Harbor: its GC job; ECR/GCR: lifecycle policies)"
)


def parse_oci_url(url: str) -> tuple[str, str]:
    """``oci://host[:port]/repository`` -> (host[:port], repository); user mistakes are one-line errors."""
    rest = url[len("oci://") :]
    host, _, repo = rest.partition("/")
    repo = repo.strip("/")
    shape = "use oci://host[:port]/repository, e.g. oci://registry.example.com/llm/engines"
    if "@" in host:  # oci://user:password@host/...: never echoed (docs/http.md), never sent
        raise RegistryURLError(
            f"'{redact.url(url)}' carries credentials in the URL, which the registry client does not take",
            f"drop the 'user:password@' part and log in instead: `docker login {host.rpartition('@')[2]}`, or "
            "TOOLCHAIN_OCI_USERNAME/TOOLCHAIN_OCI_PASSWORD",
        )
    if not host or not repo:
        raise RegistryURLError(f"'{redact.url(url)}' names no repository", shape)
    if "@" in repo or ":" in repo:
        raise RegistryURLError(
            f"'{url}' names a tag or digest: the registry URL names a repository, and entries are tagged by key",
            "drop the ':tag' / '@digest' part",
        )
    if not HOST_RE.fullmatch(host):
        raise RegistryURLError(f"'{host}' in '{url}' is not a host[:port]", shape)
    if not REPO_RE.fullmatch(repo):
        raise RegistryURLError(
            f"'{repo}' in '{url}' is not an OCI repository name",
            "use lowercase letters and digits, separated by '.', '_', '__' or '-', in '/'-separated parts",
        )
    if host.lower() in DOCKER_HUB_HOSTS and "/" not in repo:
        repo = f"library/{repo}"
    return host, repo


def _oci_error(resp: Any) -> str:
    """The first OCI error of a response body (``{"errors": [{"code", "message"}]}``), or ''."""
    try:
        errs = resp.json().get("errors") or []
        first = errs[0]
        return f"{first.get('code', '')}: {first.get('message', '')}".strip(": ")[:200]
    except Exception:
        return ""


def entry_to_oci(entry: dict[str, Any], record: tuple[str, int] | None = None) -> dict[str, Any]:
    """An entry manifest (the registry's JSON) as an OCI image manifest of the toolchain's artifact type;
    ``record`` (digest, size): the blob holding that JSON, referenced as the manifest's config (which ORAS
    and other clients never restore as a file) and by the ``dev.toolchain.record`` annotation."""
    files: dict[str, dict[str, Any]] = entry.get("files") or {}
    layers = []
    for rel, f in sorted(files.items()):
        digest = str(f.get("digest", ""))
        if not digest.startswith("sha256:"):
            raise RegistryError(
                f"entry {str(entry.get('key'))[:16]} has {digest.split(':')[0]} digests; an OCI registry holds sha256",
                "push the engine directory itself to the oci:// registry (`toolchain cache push DIR --registry oci://...`)",
            )
        ann = {TITLE: rel}
        if f.get("executable"):
            ann[A_EXEC] = "true"
        layers.append({"mediaType": FILE_MT, "digest": digest, "size": int(f.get("size", 0)), "annotations": ann})
    listing = {rel: [f.get("digest"), bool(f.get("executable"))] for rel, f in sorted(files.items())}
    extra: dict[str, str] = {}
    config = dict(EMPTY)
    if record is not None:
        config = {"mediaType": RECORD_MT, "digest": record[0], "size": record[1]}
        extra[A_RECORD] = record[0]
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MT,
        "artifactType": ARTIFACT_TYPE,
        "config": config,
        "layers": layers,
        "annotations": {
            **extra,
            CREATED: str(entry.get("created", "")),
            A_KEY: str(entry.get("key", "")),
            A_CONTENT: "sha256:" + sha256_text(canonical_json(listing)),
            A_KIND: str(entry.get("kind", "engine")),
            A_SCHEMA: str(entry.get("schema_version", 1)),
            A_PROVENANCE: canonical_json(entry.get("provenance") or {}),
        },
    }


def oci_to_entry(m: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """An OCI image manifest as the registry's entry JSON (validated afterwards by ``parse_manifest``).

    Each layer with ``org.opencontainers.image.title`` is a file at that path (ORAS's layout); layers
    without a title are not files (ORAS skips them too). An artifact pushed by another client gets
    ``key`` (its tag or manifest digest) and kind ``artifact``; its annotations are kept as provenance."""
    if m.get("mediaType") in INDEX_MTS or "manifests" in m:
        raise ManifestError(f"{where} is an image index, not an artifact manifest", "pull one of its manifests")
    layers = m.get("layers")
    if not isinstance(layers, list):
        raise ManifestError(f"{where} has no layers list")
    ann = m.get("annotations") or {}
    if not isinstance(ann, dict):
        raise ManifestError(f"{where} has annotations that are not a string map")
    files: dict[str, dict[str, Any]] = {}
    for layer in layers:
        la = (layer.get("annotations") if isinstance(layer, dict) else None) or {}
        title = la.get(TITLE)
        if not title:
            continue
        if str(la.get(ORAS_UNPACK, "")).lower() == "true":
            raise ManifestError(
                f"{where}: layer {str(title)[:80]!r} is a packed directory (ORAS `push DIR`), not a file",
                "push the directory's files one by one (`oras push REF dir/*` or `toolchain cache push DIR`)",
            )
        if title in files:
            raise ManifestError(f"{where}: two layers are titled {str(title)[:80]!r}")
        files[str(title)] = {
            "digest": layer.get("digest"),
            "size": layer.get("size"),
            "executable": str(la.get(A_EXEC, "")).lower() == "true",
        }
    ours = A_KEY in ann
    try:
        provenance = json.loads(ann[A_PROVENANCE]) if A_PROVENANCE in ann else {}
        schema = int(ann.get(A_SCHEMA, 1))
    except (ValueError, TypeError) as e:
        raise ManifestError(f"{where} has unreadable toolchain annotations") from e
    if not ours:
        provenance = {"oci": {"artifactType": m.get("artifactType"), "annotations": ann}}
    return {
        "schema_version": schema,
        "key": ann.get(A_KEY, key),
        "kind": ann.get(A_KIND, "engine" if ours else "artifact"),
        "files": files,
        "provenance": provenance,
        "created": str(ann.get(CREATED, "")),
    }


class _Broken(Exception):
    """A request whose stream broke (connection lost, timed out): the caller resumes where the registry is."""


class OCIBackend(Backend):
    """An OCI repository as the registry's store (see the module docstring)."""

    streams_bytes = True
    ingest_meters = True
    lists_cheaply = True  # one tags list answers "which keys are here"
    digest_algo = "sha256"
    gc_note = GC_NOTE

    def __init__(self, host: str, repo: str, *, client: Any = None) -> None:
        self.host, self.repo = host, repo
        self._unlisted: list[tuple[str, str]] = []  # what the last listing of manifests/ could not read
        self.url = f"oci://{host}/{repo}"
        api_host = "registry-1.docker.io" if host.lower() in DOCKER_HUB_HOSTS else host
        self.scheme = "http" if settings.oci_plain_http() else "https"
        self.base = f"{self.scheme}://{api_host}/v2/{repo}"
        _, self.read_timeout = http.timeouts()
        # storage redirects (S3) are followed; httpx drops Authorization when the origin changes
        self.client = client or http.client(headers={"User-Agent": "toolchain-oci/1"})
        self._auth: str | None = None
        self._creds: Credentials | None = None
        self._creds_loaded = False
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request sent: tests and benchmarks
        self._config_pushed = False
        self._api_checked = False
        self._monolithic = False  # the registry refused a chunked upload: whole-file PUTs from now on

    # --- HTTP ----------------------------------------------------------------------------------

    def _credentials(self) -> Credentials | None:
        with self._lock:
            if not self._creds_loaded:
                self._creds = lookup_credentials(self.host)
                self._creds_loaded = True
            return self._creds

    def _authenticate(self, challenge: str, push: bool, tried: str | None) -> None:
        scheme, params = parse_challenge(challenge)
        creds = self._credentials()
        if scheme == "basic":
            if creds is None:
                raise anonymous_refused(self.host, 401)
            if tried == creds.basic():
                raise self._auth_error(401, f"the credentials from {creds.source}", push)
            self._auth = creds.basic()
            return
        if scheme == "bearer":
            scope = f"repository:{self.repo}:pull,push" if push else f"repository:{self.repo}:pull"
            token, _ = fetch_token(self.client, self.host, params, scope, creds, 30.0)
            self._auth = f"Bearer {token}"
            return
        raise RegistryError(
            f"registry {self.host} asks for authentication this client does not speak ({scheme or 'none'})",
            "use a registry with Basic or Bearer token auth",
        )

    def _auth_error(self, status: int, who: str, push: bool) -> RegistryAuthError:
        if status == 403:
            return RegistryAuthError(
                f"registry {self.host} denied {'push to' if push else 'pull from'} {self.repo} (403) to {who}",
                f"ask for {'push' if push else 'pull'} access to {self.repo}, or log in as a user who has it "
                f"(`docker login {self.host}`, or TOOLCHAIN_OCI_USERNAME/TOOLCHAIN_OCI_PASSWORD)",
            )
        return RegistryAuthError(
            f"registry {self.host} refused {who} for {self.repo} (401)",
            f"log in with `docker login {self.host}` (or `oras login`), or set TOOLCHAIN_OCI_USERNAME and "
            "TOOLCHAIN_OCI_PASSWORD",
        )

    def _unreachable(self, e: BaseException) -> RegistryError:
        import httpx

        text = str(e)
        cause = e.__cause__ if isinstance(e, _Broken) else e
        n = http.tries_of(cause) if cause is not None else 1
        tries = f"{n} tries" if n > 1 else "1 try"
        if isinstance(cause, httpx.TimeoutException) and not isinstance(cause, httpx.ConnectTimeout):
            return RegistryUnavailableError(
                f"registry {self.host} stopped answering (nothing for {self.read_timeout:g} s, {tries}); "
                "raise TOOLCHAIN_HTTP_READ_TIMEOUT if it is only slow",
                "check the registry's health and the network, then try again",
            )
        if isinstance(cause, httpx.ConnectTimeout):
            return RegistryUnavailableError(
                f"cannot connect to registry {self.host} (no answer to connect, {tries}); "
                "raise TOOLCHAIN_HTTP_CONNECT_TIMEOUT if the network is only slow",
                "check the host and port in the oci:// URL and the network",
            )
        if self.scheme == "https" and ("SSL" in text or "WRONG_VERSION" in text.upper() or "TLS" in text):
            return RegistryPlainHTTPError(
                f"cannot talk HTTPS to registry {self.host} ({type(e).__name__}): it may speak plain HTTP",
                "set TOOLCHAIN_OCI_PLAIN_HTTP=1 for a registry without TLS (or give the registry a certificate)",
            )
        return RegistryUnavailableError(
            f"cannot reach registry {self.host} ({type(e).__name__})",
            "check the host and port in the oci:// URL and the network (HTTPS is the default: "
            "TOOLCHAIN_OCI_PLAIN_HTTP=1 for plain HTTP)",
        )

    def _request(
        self,
        method: str,
        url: str,
        *,
        push: bool = False,
        body: bytes | Callable[[], Iterable[bytes]] | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        stream: bool = False,
        resumable: bool = False,
        idempotent: bool | None = None,
    ) -> Any:
        """Send one request through ``toolchain.http.send`` (its retries on 429/5xx and lost connections, its
        backoff), with token/Basic auth on a 401 (once). ``resumable``: the caller resumes a broken transfer from
        where the registry is, so a lost connection raises :class:`_Broken` at once instead of being retried
        here. The response is returned whatever its status (streamed ones: the caller closes it)."""
        import httpx

        full = url if url.startswith(("http://", "https://")) else f"{self.base}{url}"
        # credentials go to the registry only, never to another host an upload Location names
        ours = httpx.URL(full).netloc == httpx.URL(self.base).netloc
        safe = method in http.IDEMPOTENT if idempotent is None else idempotent
        policy = http.ONCE if resumable and safe else POLICY  # a PATCH is resent only when nothing went out

        def sent(resp: Any) -> None:
            self.requests.append((method, httpx.URL(full).path))

        authed = False
        while True:
            h = dict(headers or {})
            if self._auth and ours:
                h["Authorization"] = self._auth
            try:
                resp = http.send(
                    method,
                    full,
                    client=self.client,
                    headers=h,
                    content=body,
                    params=params,
                    stream=stream,
                    policy=policy,
                    idempotent=idempotent,
                    observe=sent,
                )
            except httpx.TransportError as e:
                if resumable:
                    raise _Broken(str(e)) from e
                raise self._unreachable(e) from e
            if resp.status_code == 401 and not authed and ours:
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.close()
                self._authenticate(challenge, push, self._auth)
                authed = True
                continue
            return resp

    def _service(self) -> http.Service:
        """The registry as ``toolchain.http`` names it in errors: its error family, its hints, its error bodies."""
        return http.Service(
            f"registry {self.host}",
            kinds=REGISTRY_ERRORS,
            hints={
                404: f"check the URL: is {self.scheme}://{self.host}/v2/ an OCI registry, and does it have (or create "
                f"on push) the repository {self.repo}? Harbor projects and ECR repositories must exist first",
                429: "the registry is failing or overloaded: try again later, or ask its operators",
                500: "the registry is failing or overloaded: try again later, or ask its operators",
            },
            policy=POLICY,
            detail=_oci_error,
        )

    def _fail(self, resp: Any, what: str, *, push: bool = False) -> RegistryError:
        """A one-line error for an unexpected answer, naming the registry, what was asked and the fix: the
        credentials' source on 401/403 and the registry's delete setting on 405 here, the rest by
        ``toolchain.http.status_error``."""
        code = resp.status_code
        if code in (401, 403):
            creds = self._credentials()
            if code == 401 and creds is None:
                return anonymous_refused(self.host, code)
            who = f"the credentials from {creds.source}" if creds is not None else "anonymous access"
            return self._auth_error(code, who, push)
        if code == 405:
            return RegistryError(
                f"registry {self.host} does not allow {what} (405)",
                "deletes must be enabled on the registry (distribution: storage.delete.enabled: true)",
            )
        err = http.status_error(resp, what, self._service())
        assert isinstance(err, RegistryError)  # REGISTRY_ERRORS
        return err

    @staticmethod
    def _location(resp: Any) -> str:
        loc = resp.headers.get("Location")
        if not loc:
            raise RegistryError(f"the registry answered {resp.status_code} to an upload without a Location")
        return urljoin(str(resp.request.url), str(loc))

    # --- blobs ---------------------------------------------------------------------------------

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
            if resp.status_code == 400 and "DIGEST_INVALID" in _oci_error(resp):
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
            offset, broken = 0, 0
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
                except _Broken:
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
                broken += 1
                if broken > RETRIES:
                    if status == 0:
                        raise RegistryUnavailableError(
                            f"the upload of {src.name} to registry {self.host} broke {broken} times",
                            "check the network (or the registry's proxy body-size limits), then push again",
                        )
                    raise self._fail(resp, f"uploading {src.name}", push=True)
                POLICY.wait(broken)
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
        written, broken = 0, 0
        with open(dest, "wb") as out:
            while True:
                headers = {"Range": f"bytes={written}-"} if written else {}
                try:
                    resp = self._request(
                        "GET", f"/blobs/{digest}", headers=headers, stream=True, resumable=bool(written)
                    )
                except _Broken:
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
                        elif written and resp.status_code in RETRY_STATUS and broken < RETRIES:
                            raise _Broken(f"{resp.status_code} on resume")
                        else:
                            resp.read()
                            raise self._fail(resp, f"GET of blob {digest[:19]}")
                        # raw bytes unless the response is content-encoded (the blob is what is hashed);
                        # httpx's re-chunking of iter_bytes costs ~2x the time on large blobs
                        chunks = resp.iter_bytes() if resp.headers.get("Content-Encoding") else resp.iter_raw()
                        for b in chunks:
                            out.write(b)
                            h.update(b)
                            written += len(b)
                            if self.meter is not None:
                                self.meter(len(b))
                        return "sha256:" + h.hexdigest()
                    except _stream_errors() as e:
                        if broken >= RETRIES:
                            raise self._unreachable(e) from e
                    finally:
                        resp.close()
                broken += 1
                if broken > RETRIES:
                    raise RegistryUnavailableError(
                        f"the download of blob {digest[:19]} from registry {self.host} broke {broken} times",
                        "check the network, then pull again",
                    )
                POLICY.wait(broken)

    # --- manifests and tags --------------------------------------------------------------------

    def _get_manifest(self, ref: str) -> tuple[dict[str, Any], str] | None:
        """(manifest, its digest) for a tag or digest, None when there is none."""
        accept = ", ".join((MANIFEST_MT, DOCKER_MANIFEST_MT, *INDEX_MTS))
        resp = self._request("GET", f"/manifests/{ref}", headers={"Accept": accept})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"GET of manifest {ref[:71]}")
        raw = resp.content
        if len(raw) > MAX_MANIFEST:
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is larger than {MAX_MANIFEST} bytes")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if ref.startswith("sha256:") and digest != ref:
            raise ManifestError(f"registry {self.host} served a manifest for {ref} whose bytes hash to {digest}")
        named = resp.headers.get("Docker-Content-Digest")
        if named and str(named).startswith("sha256:") and named != digest:
            raise ManifestError(
                f"registry {self.host} served manifest {ref[:71]} as {str(named)[:71]} but its bytes hash to "
                f"{digest}: it was changed in the registry's storage",
                "do not use this entry; push it again from a trusted copy, and ask the registry's operators",
            )
        try:
            m = json.loads(raw)
        except ValueError as e:
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is not JSON") from e
        if not isinstance(m, dict):
            raise ManifestError(f"manifest {ref[:71]} in {self.url} is not a JSON object")
        return m, digest

    def _head_manifest(self, ref: str) -> str | None:
        """The digest a tag (or digest) names, None when absent."""
        accept = ", ".join((MANIFEST_MT, DOCKER_MANIFEST_MT, *INDEX_MTS))
        resp = self._request("HEAD", f"/manifests/{ref}", headers={"Accept": accept})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"HEAD of manifest {ref[:71]}")
        digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return str(digest)
        got = self._get_manifest(ref)
        return got[1] if got else None

    def _put_manifest(self, ref: str, m: dict[str, Any]) -> str:
        raw = json.dumps(m, separators=(",", ":"), sort_keys=True).encode()
        mt = str(m.get("mediaType") or MANIFEST_MT)
        for attempt in range(POLICY.attempts):
            resp = self._request("PUT", f"/manifests/{ref}", push=True, body=raw, headers={"Content-Type": mt})
            if resp.status_code in (200, 201):
                break
            # distribution checks each referenced blob when a manifest arrives; while another client commits
            # the same blob (concurrent pushes of one engine) it may answer DIGEST_INVALID or BLOB_UNKNOWN for
            # a blob that is whole a moment later: a short, bounded retry, then the registry's own error
            transient = resp.status_code == 400 and any(
                code in _oci_error(resp) for code in ("DIGEST_INVALID", "BLOB_UNKNOWN")
            )
            if not transient or attempt == POLICY.attempts - 1:
                raise self._fail(resp, f"PUT of manifest {ref[:71]}", push=True)
            POLICY.wait(attempt + 1)
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def _entry_ref(self, key: str) -> tuple[dict[str, Any], str] | None:
        """An entry's manifest: tagged by key, else (another client's artifact) by manifest digest."""
        got = self._get_manifest(key) or self._get_manifest(f"sha256:{key}")
        if got is None:
            self._check_api()
        return got

    def key_of_manifest_digest(self, hexd: str) -> str | None:
        """The entry key a manifest digest reference names: the key the toolchain's manifest records, the
        digest itself for another client's artifact, None when the registry holds no such manifest (a
        64-hex key given in digest form is taken as the key it is)."""
        if self._head_manifest(hexd) is not None:  # a tag: the toolchain's key
            return hexd
        got = self._get_manifest(f"sha256:{hexd}")
        if got is None:
            return None
        ann = got[0].get("annotations") or {}
        key = ann.get(A_KEY) if isinstance(ann, dict) else None
        return str(key) if isinstance(key, str) and KEY_RE.fullmatch(key) else hexd

    def _check_api(self) -> None:
        """Once, when something is not found: is this an OCI registry at all? (``GET /v2/`` answers 200 or
        401 on every registry; a 404 there means a wrong host, port or path, not a missing entry.)"""
        if self._api_checked:
            return
        resp = self._request("GET", self.base.rsplit("/v2/", 1)[0] + "/v2/")
        if resp.status_code == 404:
            raise self._fail(resp, "GET /v2/ (the API root every OCI registry serves)")
        self._api_checked = True

    def tag_names(self) -> builtins.list[str]:
        """Every tag of the repository (one request per page of the tags list; 404: no repository yet)."""
        out: list[str] = []
        url: str | None = "/tags/list"
        while url:
            resp = self._request("GET", url)
            if resp.status_code == 404 and "NAME_UNKNOWN" in _oci_error(resp):
                return []
            if resp.status_code != 200:
                raise self._fail(resp, f"listing the tags of {self.repo}")
            try:
                tags = resp.json().get("tags") or []
            except (ValueError, AttributeError) as e:
                raise RegistryError(f"registry {self.host} answered the tags list with no JSON") from e
            out += [str(t) for t in tags]
            nxt = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', resp.headers.get("Link", ""))
            url = urljoin(str(resp.request.url), nxt.group(1)) if nxt else None
        return out

    # --- the Backend interface -----------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        if path.startswith("manifests/") and path.endswith(".json"):
            return "manifest", path[len("manifests/") : -len(".json")]
        if path.startswith("refs/tags/"):
            return "tag", path[len("refs/tags/") :]
        return "other", path

    def exists(self, path: str) -> bool:
        digest = self._digest_of(path)
        if digest is not None:
            return self.blob_exists(digest)
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            if self._head_manifest(name) is not None or self._head_manifest(f"sha256:{name}") is not None:
                return True
            self._check_api()
            return False
        if kind == "tag" and TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            return self._head_manifest(name) is not None
        return False

    def read_bytes(self, path: str) -> bytes:
        digest = self._digest_of(path)
        if digest is not None:
            resp = self._request("GET", f"/blobs/{digest}")
            if resp.status_code == 404:
                raise FileNotFoundError(path)
            if resp.status_code != 200:
                raise self._fail(resp, f"GET of blob {digest[:19]}")
            return bytes(resp.content)
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            got = self._entry_ref(name)
            if got is None:
                raise FileNotFoundError(path)
            where = f"{self.url}:{name[:16]}"
            entry = oci_to_entry(got[0], name, where)
            return self._trusted(got[0], entry, where)
        if kind == "tag" and TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            got = self._get_manifest(name)
            if got is None:
                raise FileNotFoundError(path)
            ann = got[0].get("annotations") or {}
            return str(ann.get(A_KEY) or got[1].split(":", 1)[1]).encode()
        raise FileNotFoundError(path)

    def _trusted(self, m: dict[str, Any], entry: dict[str, Any], where: str) -> bytes:
        """The entry JSON to trust for manifest ``m``: its record blob, checked against every layer (title,
        digest, size, mode; no file missing or extra). A toolchain manifest without a record (pushed before
        records) is checked against its content annotation; another client's artifact has neither."""
        ann = m.get("annotations") or {}
        config = m.get("config")
        layers = [la for la in m.get("layers") or [] if isinstance(la, dict)]
        recs = [la for la in [config, *layers] if isinstance(la, dict) and la.get("mediaType") == RECORD_MT]
        if A_RECORD not in ann and not recs:
            if A_KEY in ann:
                files = entry.get("files") or {}
                listing = {rel: [f.get("digest"), bool(f.get("executable"))] for rel, f in sorted(files.items())}
                if ann.get(A_CONTENT) != "sha256:" + sha256_text(canonical_json(listing)):
                    raise ManifestError(
                        f"{where}: the manifest's layers differ from the content it records "
                        "(a layer retitled, swapped or dropped)",
                        "do not use this entry; push it again from a trusted copy",
                    )
            return json.dumps(entry).encode()
        if len(recs) != 1 or recs[0] is not config or recs[0].get("digest") != ann.get(A_RECORD):
            raise ManifestError(
                f"{where}: the manifest's record (its config) and its {A_RECORD} annotation disagree",
                "do not use this entry; push it again from a trusted copy",
            )
        digest = str(recs[0].get("digest"))
        raw = self.record_bytes(digest)
        if len(raw) != recs[0].get("size"):
            raise ManifestError(f"{where}: the manifest gives the record another size", "push the entry again")
        record = parse_manifest(raw, where)
        key = str(entry.get("key"))
        if record.key != key:
            raise ManifestError(f"{where}: the record is of entry {record.key[:16]}, not {key[:16]}")
        check_against_record(record, entry.get("files") or {}, where)
        return raw

    def record_bytes(self, digest: str) -> bytes:
        """A record blob's bytes, refused unless they hash to ``digest``."""
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ManifestError(f"record digest {digest[:80]!r} in {self.url} is not a sha256 digest")
        resp = self._request("GET", f"/blobs/{digest}")
        if resp.status_code == 404:
            raise CorruptArtifactError(f"{self.url} lacks the record blob {digest[:19]}", "push the entry again")
        if resp.status_code != 200:
            raise self._fail(resp, f"GET of record blob {digest[:19]}")
        raw = bytes(resp.content)
        if len(raw) > MAX_MANIFEST or "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise ManifestError(
                f"the record blob {digest[:19]} in {self.url} does not match its digest",
                "do not use this entry; push it again from a trusted copy",
            )
        return raw

    # --- signatures (toolchain/registry/signing.py; docs/signing.md) -------------------------------

    def signed_subject(self, key: str) -> tuple[bytes, str]:
        """(the entry's trusted record bytes, the digest of the manifest they came with), from one GET:
        the digest a cosign signature of this entry names."""
        got = self._entry_ref(key)
        if got is None:
            from toolchain.errors import ArtifactNotFoundError

            raise ArtifactNotFoundError(key, self.url)
        where = f"{self.url}:{key[:16]}"
        return self._trusted(got[0], oci_to_entry(got[0], key, where), where), got[1]

    def read_signatures(self, subject: str) -> builtins.list[tuple[bytes, str]]:
        """Every (payload, base64 signature) of the cosign signature manifest ``sha256-<hex>.sig``."""
        from toolchain.registry.signing import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MT

        got = self._get_manifest(subject.replace(":", "-") + ".sig")
        if got is None:
            return []
        out = []
        for layer in got[0].get("layers") or []:
            if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING_MT:
                continue
            sig = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
            digest = str(layer.get("digest", ""))
            if isinstance(sig, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                try:
                    out.append((self.record_bytes(digest), sig))  # its bytes checked against the digest
                except (CorruptArtifactError, ManifestError):
                    continue  # a payload missing or altered: no signature from this layer
        return out

    def write_signature(self, subject: str, payload: bytes, sig: str) -> None:
        """Add a signature layer to the cosign signature manifest of ``subject`` (created when absent); the
        layers of other signers are kept."""
        from toolchain.registry.signing import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MT

        tag = subject.replace(":", "-") + ".sig"
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        if not self.blob_exists(digest):
            self.upload_bytes(payload, digest)
        got = self._get_manifest(tag)
        layers = [la for la in (got[0].get("layers") or []) if isinstance(la, dict)] if got else []
        # one layer per signer: two signers of one entry sign the same payload (one blob, two annotations)
        layers = [la for la in layers if (la.get("annotations") or {}).get(SIGNATURE_ANNOTATION) != sig]
        layers.append(
            {
                "mediaType": SIMPLE_SIGNING_MT,
                "digest": digest,
                "size": len(payload),
                "annotations": {SIGNATURE_ANNOTATION: sig},
            }
        )
        # the image config cosign writes for a signature image: its rootfs lists the payload layers
        config = canonical_json(
            {
                "architecture": "",
                "config": {},
                "created": "0001-01-01T00:00:00Z",
                "history": [{"created": "0001-01-01T00:00:00Z"}],
                "os": "",
                "rootfs": {"type": "layers", "diff_ids": [str(la.get("digest")) for la in layers]},
            }
        ).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        if not self.blob_exists(config_digest):
            self.upload_bytes(config, config_digest)
        m = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MT,
            "config": {"mediaType": SIG_CONFIG_MT, "digest": config_digest, "size": len(config)},
            "layers": layers,
        }
        self._put_manifest(tag, m)

    def _ensure_config(self) -> None:
        if not self._config_pushed:
            if not self.blob_exists(EMPTY_DIGEST):
                self.upload_bytes(EMPTY_DATA, EMPTY_DIGEST)
            self._config_pushed = True

    def _write_entry(self, key: str, data: bytes) -> str:
        try:
            entry = json.loads(data)
        except ValueError as e:
            raise ManifestError(f"entry {key[:16]} is not JSON") from e
        record = "sha256:" + hashlib.sha256(data).hexdigest()
        self._ensure_config()
        if not self.blob_exists(record):
            self.upload_bytes(data, record)
        m = entry_to_oci(entry, (record, len(data)))
        return self._put_manifest(key, m)

    def write_bytes(self, path: str, data: bytes) -> None:
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            self._write_entry(name, data)
            return
        if kind == "tag" and OCI_TAG_RE.fullmatch(name) and not KEY_RE.fullmatch(name):
            key = data.decode().strip()
            got = self._entry_ref(key)
            if got is None:
                raise FileNotFoundError(f"manifests/{key}.json")
            m = dict(got[0])
            ann = dict(m.get("annotations") or {})
            ann.setdefault(A_KEY, key)
            ann[A_TAG] = name  # a manifest of its own: deleting the tag never deletes the entry (module doc)
            m["annotations"] = ann
            self._put_manifest(name, m)
            return
        raise RegistryError(
            f"{path} cannot be written in an OCI registry (blobs are named by their content)",
            "push entries with `toolchain cache push`",
        )

    def write_new(self, path: str, data: bytes) -> bool:
        """Create an entry's tag unless it exists. OCI has no create-only PUT: the tag is checked before and
        after, and a push that finds another manifest there afterwards reports that it lost (a narrow race
        remains in which both succeed and the later one stands)."""
        kind, name = self._split(path)
        if kind != "manifest":
            return super().write_new(path, data)
        if self._head_manifest(name) is not None:
            return False
        ours = self._write_entry(name, data)
        return self._head_manifest(name) == ours

    def put_file(self, path: str, src: Path, digest: str) -> None:
        want = self._digest_of(path)
        if want is None or want != digest:
            raise RegistryError(f"{path}: an OCI registry holds sha256 blobs only")
        if self.blob_exists(digest):
            if self.meter is not None:
                self.meter(src.stat().st_size)
            return
        size = src.stat().st_size
        if size <= SMALL:
            data = src.read_bytes()
            got = "sha256:" + hashlib.sha256(data).hexdigest()
            if got == digest:
                self.upload_bytes(data, digest)
                if self.meter is not None:
                    self.meter(size)
        else:
            got, _ = self.upload_stream(src)
        if got != digest:
            raise CorruptArtifactError(
                f"{src} changed while it was being stored ({got} != {digest})",
                "make sure nothing writes to the directory during push",
            )

    def ingest(
        self, src: Path, algo: str, path_of: Callable[[str], str], also: dict[str, str] | None = None
    ) -> str | None:
        """Hash ``src`` in the read that uploads it: a small file is hashed, HEADed and sent only when the
        registry lacks it; a large one streams to an upload session while it is hashed. (Only sha256, the
        registry's digest: ``also`` is left as it is.)"""
        if algo != "sha256":
            return None
        size = src.stat().st_size
        if size <= SMALL:
            data = src.read_bytes()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            if not self.blob_exists(digest):
                self.upload_bytes(data, digest)
            if self.meter is not None:
                self.meter(len(data))
            return digest
        digest, _ = self.upload_stream(src)
        return digest

    def put_entry(
        self, blobs: builtins.list[tuple[str, Path, str]], manifest_path: str, manifest: bytes, *, replace: bool = True
    ) -> bool:
        self._ensure_config()
        return super().put_entry(blobs, manifest_path, manifest, replace=replace)

    def unlisted(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._unlisted)

    def get_file(self, path: str, dest: Path) -> str:
        digest = self._digest_of(path)
        if digest is None:
            raise FileNotFoundError(path)
        return self.download(digest, dest)

    def list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        if prefix == "manifests/":
            tags = self.tag_names()
            keys = {t for t in tags if KEY_RE.fullmatch(t)}
            for t in sorted(keys):
                yield f"manifests/{t}.json", 0, 0.0
            # another client's artifact (ORAS, a CI job) is only tagged by name: listed by its manifest digest
            self._unlisted = []
            for t in tags:
                if t in keys or not TAG_RE.fullmatch(t) or COSIGN_TAG_RE.fullmatch(t):
                    continue
                try:
                    got = self._get_manifest(t)
                except (RegistryError, ManifestError, CorruptArtifactError) as e:
                    self._unlisted.append((f"tag {t}", e.message))
                    continue
                if got is None:
                    continue  # untagged between the tags list and this read
                ann = got[0].get("annotations") or {}
                if not isinstance(ann, dict):
                    self._unlisted.append((f"tag {t}", "its manifest's annotations are not a string map"))
                    continue
                if A_KEY in ann:
                    continue  # the toolchain's own entries are listed by their key tags
                hexd = got[1].split(":", 1)[1]
                if hexd not in keys:
                    keys.add(hexd)
                    yield f"manifests/{hexd}.json", 0, 0.0
        elif prefix == "refs/tags/":
            for t in self.tag_names():
                if TAG_RE.fullmatch(t) and not KEY_RE.fullmatch(t) and not COSIGN_TAG_RE.fullmatch(t):
                    yield f"refs/tags/{t}", 0, 0.0
        # blobs/ and tmp/: the distribution API lists neither (GC_NOTE)

    def delete(self, path: str) -> None:
        digest = self._digest_of(path)
        if digest is not None:
            self._delete(f"/blobs/{digest}", f"deleting blob {digest[:19]}")
            return
        kind, name = self._split(path)
        if kind == "manifest" and KEY_RE.fullmatch(name):
            d = self._head_manifest(name) or self._head_manifest(f"sha256:{name}")
            if d is not None:
                self._delete(f"/manifests/{d}", f"deleting entry {name[:16]}")
            return
        if kind == "tag":
            d = self._head_manifest(name)
            if d is None:
                return
            resp = self._request("DELETE", f"/manifests/{name}", push=True)  # tag deletion (distribution-spec 1.1)
            if resp.status_code in (202, 404):
                return
            # no tag deletion (distribution 2.x): delete the tag's own manifest, unless an entry uses it too
            key = self.read_bytes(path).decode()
            if KEY_RE.fullmatch(key) and self._head_manifest(key) == d:
                raise RegistryError(
                    f"tag {name} in {self.url} shares its manifest with entry {key[:16]}, and this registry "
                    "deletes a tag only with its manifest",
                    f"re-point the tag with `toolchain cache tag {key[:12]} {name}` first",
                )
            self._delete(f"/manifests/{d}", f"deleting tag {name}")
            return
        raise FileNotFoundError(path)

    def _delete(self, url: str, what: str) -> None:
        resp = self._request("DELETE", url, push=True)
        if resp.status_code not in (200, 202, 404):
            raise self._fail(resp, what, push=True)

    def mtime(self, path: str) -> float | None:
        return 0.0 if self.exists(path) else None


def _stream_errors() -> tuple[type[BaseException], ...]:
    """What a broken download raises mid-stream (and a retryable status on resume)."""
    import httpx

    return (httpx.TransportError, httpx.StreamError, _Broken)
