"""Credentials and authentication for ``oci://`` registries (docs/oci-registry.md).

Where credentials come from, first found wins: ``TOOLCHAIN_OCI_USERNAME`` + ``TOOLCHAIN_OCI_PASSWORD``; the
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
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from toolchain import settings
from toolchain.errors import RegistryAuthError, RegistryError, RegistryUnavailableError
from toolchain.proc import capture

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
    from toolchain import http

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
