"""The HTTP side of an ``oci://`` registry: the URL, one client per repository, authentication, and what a
failed request means (docs/oci-registry.md, docs/http.md).

Every request goes through ``toolchain.http.send`` under :data:`POLICY` (retries on 429/5xx and lost connections,
the backoff); a transfer the caller resumes itself (:mod:`toolchain.registry.oci.blobs`) asks for one try and
gets :class:`Broken` when the connection breaks.

Credentials, first found wins: ``TOOLCHAIN_OCI_USERNAME`` + ``TOOLCHAIN_OCI_PASSWORD``; the
Docker config (``$DOCKER_CONFIG/config.json``, default ``~/.docker/config.json``): ``credHelpers[host]``, else
``credsStore`` (both run ``docker-credential-<name> get``), else ``auths[host]``. Nothing here prints or
logs a secret: :class:`Credentials` hides it from ``repr`` and errors name only where it came from.

The token flow is Docker's (distribution ``docs/spec/auth/token.md``): a 401 names a realm, a service and a
scope in ``WWW-Authenticate: Bearer ...``; the client asks the realm for a token (Basic credentials when it
has them, anonymously otherwise; an identity token as an OAuth2 refresh token) and sends it as
``Authorization: Bearer``. A ``Basic`` challenge is answered with the credentials themselves.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urljoin

from toolchain import http, redact, settings
from toolchain.errors import (
    RegistryAuthError,
    RegistryError,
    RegistryPlainHTTPError,
    RegistryUnavailableError,
    RegistryURLError,
    UserInputError,
)
from toolchain.proc import capture
from toolchain.waits import Waits, what_of

# toolchain/http.py's policy: per request on 429/5xx/connection errors (idempotent requests; a PATCH whose bytes
# went out is resumed from the upload's status instead), and per chunk/download on a broken stream (blobs.py)
# a read or write that timed out is a registry that stopped answering: named at once, not retried (a frozen
# registry would otherwise hold a command for tries x the read timeout)
POLICY = http.Backoff(retry_stalls=False)
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

# --- credentials and the token flow (module docstring) ----------------------------------------------------------

DOCKER_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io"}
DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # the Docker CLI's key for Docker Hub in config.json
HELPER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Credentials:
    username: str
    secret: str = field(repr=False)
    source: str  # where they came from, for messages: never the secret itself
    identity_token: bool = False  # the secret is an OAuth2 refresh token (Docker's `identitytoken`)

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.secret}".encode()).decode()


def _host_key(entry: str) -> str:
    """A config.json ``auths`` key as a bare host[:port]: ``https://host:5000/v1/`` -> ``host:5000``."""
    entry = entry.strip()
    if "://" in entry:
        entry = entry.split("://", 1)[1]
    return entry.split("/", 1)[0].lower()


def _config_keys(host: str) -> set[str]:
    h = host.lower()
    return DOCKER_HUB_HOSTS | {"index.docker.io/v1"} if h in DOCKER_HUB_HOSTS else {h}


def _run_helper(name: str, host: str, config: str) -> Credentials | None:
    binary = f"docker-credential-{name}"
    if shutil.which(binary) is None:
        raise RegistryAuthError(
            f"{config} names the credential helper {binary}, which is not installed",
            f"install {binary}, or remove it from {config} and set TOOLCHAIN_OCI_USERNAME/TOOLCHAIN_OCI_PASSWORD",
        )
    server = DOCKER_HUB_KEY if host.lower() in DOCKER_HUB_HOSTS else host
    proc = capture([binary, "get"], input=server, timeout=HELPER_TIMEOUT_S)
    if proc.timed_out:
        raise RegistryAuthError(
            f"credential helper {binary} did not answer for {host} within {HELPER_TIMEOUT_S:.0f} s",
            "unlock its keychain (or log in again with `docker login`), then run the command again",
        )
    if proc.returncode != 0:
        # "credentials not found in native keychain": no entry for this host; anything else is the helper's failure
        if "not found" in (proc.stdout + proc.stderr).lower():
            return None
        raise RegistryAuthError(
            f"credential helper {binary} failed for {host} (exit {proc.returncode})",
            f"run `echo {server} | {binary} get` to see why, or log in again with `docker login {host}`",
        )
    try:
        got = json.loads(proc.stdout)
        user, secret = str(got["Username"]), str(got["Secret"])
    except (ValueError, KeyError, TypeError) as e:
        raise RegistryAuthError(
            f"credential helper {binary} answered for {host} with something that is not its JSON", None
        ) from e
    if not secret:
        return None
    where = f"{binary} (from {config})"
    if user == "<token>":  # Docker's convention: the secret is an identity (refresh) token
        return Credentials("<token>", secret, where, identity_token=True)
    return Credentials(user, secret, where)


def docker_config() -> tuple[dict[str, Any], str]:
    """The Docker config as a dict (empty when there is none) and its path for messages."""
    path = settings.docker_config_dir() / "config.json"
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return {}, str(path)
    except OSError as e:
        raise RegistryAuthError(f"cannot read {path}: {e.strerror}", "fix its permissions or set DOCKER_CONFIG") from e
    try:
        cfg = json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise RegistryAuthError(f"{path} is not valid JSON", "fix it (or log in again with `docker login`)") from e
    if not isinstance(cfg, dict):
        raise RegistryAuthError(f"{path} is not a JSON object", "fix it (or log in again with `docker login`)")
    return cfg, str(path)


def lookup_credentials(host: str) -> Credentials | None:
    """Credentials for ``host`` (host[:port]) from the environment or the Docker config; None: anonymous."""
    env = settings.oci_credentials()
    if env is not None:
        return Credentials(env[0], env[1], "TOOLCHAIN_OCI_USERNAME/TOOLCHAIN_OCI_PASSWORD")
    cfg, where = docker_config()
    keys = _config_keys(host)
    helpers = cfg.get("credHelpers") or {}
    if isinstance(helpers, dict):
        for k, name in helpers.items():
            if _host_key(k) in keys and isinstance(name, str) and name:
                return _run_helper(name, host, where)
    auths = cfg.get("auths") or {}
    entry: dict[str, Any] = {}
    if isinstance(auths, dict):
        for k, v in auths.items():
            if _host_key(k) in keys and isinstance(v, dict):
                entry = v
                break
    store = cfg.get("credsStore")
    if isinstance(store, str) and store and not entry.get("auth") and not entry.get("identitytoken"):
        return _run_helper(store, host, where)
    if entry.get("identitytoken"):
        return Credentials("<token>", str(entry["identitytoken"]), where, identity_token=True)
    if entry.get("auth"):
        try:
            user, _, secret = base64.b64decode(str(entry["auth"])).decode().partition(":")
        except (ValueError, UnicodeDecodeError) as e:
            raise RegistryAuthError(
                f"the auth entry for {host} in {where} is not base64 user:password", f"run `docker login {host}` again"
            ) from e
        return Credentials(user, secret, where) if secret else None
    if entry.get("username") and entry.get("password"):
        return Credentials(str(entry["username"]), str(entry["password"]), where)
    return None


def half_set() -> tuple[str, str] | None:
    """(what is set, what is missing) when only one of the two ``TOOLCHAIN_OCI_*`` credential variables is set.

    Then the environment gives no credentials (both are needed), and a refusal should say which one is missing
    rather than that none were found.
    """
    user, password = settings.OCI_USERNAME, settings.OCI_PASSWORD
    if user.get() and not password.get():
        return user.name, password.name
    if password.get() and not user.get():
        return password.name, user.name
    return None


def anonymous_refused(registry: str, status: int, *, token_service: bool = False) -> RegistryAuthError:
    """The one-line error for a registry (or its token service) that refused a request sent without credentials."""
    what = f"the token service of {registry}" if token_service else f"registry {registry}"
    half = half_set()
    if half is not None:
        have, missing = half
        fix = (
            f"set {missing} to the password or access token of that user"
            if missing == settings.OCI_PASSWORD.name
            else f"set {missing} to the user name the password belongs to"
        )
        return RegistryAuthError(
            f"{what} refused anonymous access ({status}): {have} is set but {missing} is not, "
            "so no credentials were sent",
            f"{fix} (or unset {have} to use `docker login {registry}`'s credentials)",
        )
    return RegistryAuthError(
        f"{what} refused anonymous access ({status}): no credentials were found for {registry}",
        f"log in with `docker login {registry}` (or `oras login`), or set TOOLCHAIN_OCI_USERNAME and "
        "TOOLCHAIN_OCI_PASSWORD",
    )


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="https://a/token",service="reg",scope="repository:x:pull,push"`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3)) for m in _PARAM.finditer(rest)}
    return scheme.lower(), params


def fetch_token(
    client: Any, registry: str, params: dict[str, str], scope: str, creds: Credentials | None, timeout: float
) -> tuple[str, float]:
    """Ask the challenge's realm for a bearer token for ``scope``: (token, lifetime in s)."""
    import httpx

    realm = params.get("realm")
    if not realm or not realm.startswith(("https://", "http://")):
        raise RegistryError(
            f"registry {registry} asked for a token without a usable realm", "the registry's auth is misconfigured"
        )
    query: dict[str, str] = {}
    if params.get("service"):
        query["service"] = params["service"]
    if scope:
        query["scope"] = scope
    try:
        if creds is not None and creds.identity_token:
            form = {**query, "grant_type": "refresh_token", "refresh_token": creds.secret, "client_id": "toolchain"}
            resp = http.send(
                "POST",
                realm,
                client=client,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                content=urlencode(form).encode(),
                timeout=timeout,
            )
        else:
            headers = {"Authorization": creds.basic()} if creds is not None else {}
            resp = http.send("GET", realm, client=client, params=query, headers=headers, timeout=timeout)
    except httpx.TransportError as e:
        raise RegistryUnavailableError(
            f"cannot reach the token service of {registry} ({realm.split('?')[0]}): {type(e).__name__}",
            "check the network, or that the registry's token realm is reachable from here",
        ) from e
    if resp.status_code == 401 and creds is None:
        raise anonymous_refused(registry, resp.status_code, token_service=True)
    if resp.status_code in (401, 403):
        who = f"the credentials from {creds.source}" if creds is not None else "anonymous access"
        raise RegistryAuthError(
            f"the token service of {registry} refused {who} ({resp.status_code}) for {scope or 'the registry'}",
            f"log in with `docker login {registry}` (or `oras login`), or set TOOLCHAIN_OCI_USERNAME and "
            "TOOLCHAIN_OCI_PASSWORD",
        )
    if resp.status_code != 200:
        failing = resp.status_code == 429 or resp.status_code >= 500  # not now (exit 75), else not this way (1)
        raise (RegistryUnavailableError if failing else RegistryError)(
            f"the token service of {registry} answered {resp.status_code} for {scope or 'the registry'}",
            "try again later, or ask the registry's operators",
        )
    try:
        body = resp.json()
        token = str(body.get("token") or body.get("access_token") or "")
        lifetime = float(body.get("expires_in") or 60)
    except (ValueError, AttributeError) as e:
        raise RegistryError(f"the token service of {registry} answered with no JSON token") from e
    if not token:
        raise RegistryError(f"the token service of {registry} answered with no token")
    return token, lifetime


# --- the repository and its answers ---------------------------------------------------------------------------


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


def oci_error(resp: Any) -> str:
    """The first OCI error of a response body (``{"errors": [{"code", "message"}]}``), or ''."""
    try:
        errs = resp.json().get("errors") or []
        first = errs[0]
        return f"{first.get('code', '')}: {first.get('message', '')}".strip(": ")[:200]
    except Exception:
        return ""


def stalled(e: BaseException) -> bool:
    """Whether ``e`` is a read or write that timed out: the registry (or the path to it) stopped answering."""
    import httpx

    return isinstance(e, (httpx.ReadTimeout, httpx.WriteTimeout))


class Broken(Exception):
    """A request whose stream broke (connection lost, timed out): the caller resumes where the registry is."""


class Transport(Waits):
    """One OCI repository over HTTP: its URL, its client, its credentials and the errors of its answers."""

    def __init__(self, host: str, repo: str, *, client: Any = None) -> None:
        self.host, self.repo = host, repo
        self.url = f"oci://{host}/{repo}"
        api_host = "registry-1.docker.io" if host.lower() in DOCKER_HUB_HOSTS else host
        self.scheme = "http" if settings.oci_plain_http() else "https"
        self.base = f"{self.scheme}://{api_host}/v2/{repo}"
        _, read = http.timeouts()
        try:
            stall = settings.oci_stall_timeout()
        except ValueError as e:
            raise UserInputError(str(e), "set it to seconds, e.g. 20 (or unset it for the default)") from e
        self.read_timeout = min(read, stall)  # the longest silence before the registry is named stopped
        self.deadline_setting = "TOOLCHAIN_OCI_STALL_TIMEOUT" if stall < read else "TOOLCHAIN_HTTP_READ_TIMEOUT"
        # storage redirects (S3) are followed; httpx drops Authorization when the origin changes
        self.client = client or http.client(headers={"User-Agent": "toolchain-oci/1"}, read=self.read_timeout)
        self._auth: str | None = None
        self._creds: Credentials | None = None
        self._creds_loaded = False
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request sent: tests and benchmarks
        self.waiting: Callable[[str], None] | None = None  # the ReportsWaits capability (registry/capabilities.py)
        self._inflight: dict[int, tuple[str, float]] = {}  # what each waiting request is, since when nothing came
        self._watching = False
        self._api_checked = False

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
        cause = e.__cause__ if isinstance(e, Broken) else e
        n = http.tries_of(cause) if cause is not None else 1
        tries = f"{n} tries" if n > 1 else "1 try"
        if isinstance(cause, httpx.TimeoutException) and not isinstance(cause, httpx.ConnectTimeout):
            return RegistryUnavailableError(
                f"registry {self.host} stopped answering (nothing for {self.read_timeout:g} s, {tries}); "
                f"raise {self.deadline_setting} if it is only slow",
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
        where the registry is, so a lost connection raises :class:`Broken` at once instead of being retried
        here. The response is returned whatever its status (streamed ones: the caller closes it)."""
        import httpx

        full = url if url.startswith(("http://", "https://")) else f"{self.base}{url}"
        # credentials go to the registry only, never to another host an upload Location names
        ours = httpx.URL(full).netloc == httpx.URL(self.base).netloc
        safe = method in http.IDEMPOTENT if idempotent is None else idempotent
        policy = http.ONCE if resumable and safe else POLICY  # a PATCH is resent only when nothing went out
        with self.waiting_on(what_of(method, httpx.URL(full).path)):
            return self._send(method, full, ours, push, body, headers, params, stream, resumable, policy, idempotent)

    def _send(
        self,
        method: str,
        full: str,
        ours: bool,
        push: bool,
        body: bytes | Callable[[], Iterable[bytes]] | None,
        headers: dict[str, str] | None,
        params: dict[str, str] | None,
        stream: bool,
        resumable: bool,
        policy: http.Backoff,
        idempotent: bool | None,
    ) -> Any:
        import httpx

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
                if resumable and not stalled(e):  # a stall is named at once, never resumed
                    raise Broken(str(e)) from e
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
            detail=oci_error,
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

    def _check_api(self) -> None:
        """Once, when something is not found: is this an OCI registry at all? (``GET /v2/`` answers 200 or
        401 on every registry; a 404 there means a wrong host, port or path, not a missing entry.)"""
        if self._api_checked:
            return
        resp = self._request("GET", self.base.rsplit("/v2/", 1)[0] + "/v2/")
        if resp.status_code == 404:
            raise self._fail(resp, "GET /v2/ (the API root every OCI registry serves)")
        self._api_checked = True
