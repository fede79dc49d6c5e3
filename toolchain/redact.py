"""The one place that takes secrets out of text the toolchain shows or writes (docs/http.md, "Never logged").

Every error line (the CLI's error table), every log record and progress line (``toolchain.logs``,
``toolchain.cli.render``), and what the toolchain writes to files of its own (a wrapped server's log header,
a benchmark's provenance) go through :func:`text` (free text) or :func:`url` (one URL). They hide:

* the ``user:password@`` part of a URL (``oci://alice:s3cret@host/repo`` -> ``oci://***@host/repo``);
* the value of a query parameter whose name says it may be a secret: token, access_token, signature, sig,
  credential (``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``), secret, password, key,
  auth, session, code, state (an upload session's ``_state``);
* the credentials of an ``Authorization`` header (``Bearer``/``Basic``/``token``), a bare ``Bearer <token>``,
  and ``password=``/``token=``/``secret=``-like assignments in free text;
* the value of a ``--password``/``--token``/``--secret``/``--api-key``-like flag in an argument list
  (:func:`argv`).

Secrets are replaced by ``***``, so a reader still sees that something was there. Nothing here does I/O, and
this module imports nothing of the toolchain (the base layer, ``tests/test_import_graph.py``).
"""

from __future__ import annotations

import re

MASK = "***"

# a query parameter whose value may be a secret (matched anywhere in its name: access_token, X-Amz-Signature)
_SECRET_PARAM = re.compile(r"token|sig|credential|secret|passw|key|auth|session|code|state", re.IGNORECASE)

# scheme://userinfo@ — userinfo is everything up to the first '@' before the host's end
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s'\"<>]*@")

# user:password@host without a scheme (a URL's authority quoted alone), not inside a path or an image reference
_BARE_USERINFO = re.compile(r"(?<![\w/.:@%+-])[\w.%+-]+:[^\s/@'\"<>]+@(?=[A-Za-z0-9\[])")

# ?name=value / &name=value inside a URL found in free text
_QUERY_PAIR = re.compile(r"([?&;])([^=&#\s'\"<>]+)=([^&#\s'\"<>]*)")

# Authorization: Bearer xxx / Authorization=Basic xxx / "Authorization": "token xxx"
_AUTH_HEADER = re.compile(
    r"(authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest|aws4-hmac-sha256)\s+)?[^\s\"',}]+",
    re.IGNORECASE,
)

# a bare "Bearer <token>" / "Basic <base64>" (a token is long; the words alone, as in "Basic or Bearer token
# auth", are left as they are)
_BARE_SCHEME = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{12,}", re.IGNORECASE)

# password=..., "token": "...", password: ... in free text (a name that stands alone, not part of another word):
# NAME=value and "NAME": "value" for every such name, NAME: value (YAML) for the unambiguous ones
_NAMES = (
    r"(?:access_|refresh_|id_|api_|auth_|session_|client_)?(?:password|passwd|pwd|token|secret|api_?key|"
    r"x-amz-signature|x-amz-security-token|x-amz-credential|sig|signature)"
)
_ASSIGNMENT = re.compile(
    rf"(?<![\w-])({_NAMES})(\s*=\s*[\"']?|[\"']\s*:\s*[\"']?)([^\s\"'&,;}}]+)",
    re.IGNORECASE,
)
# YAML's `password: value`: lowercase names only and a value that is no flag or placeholder, so that prose
# ("give them in a Secret: --registry-secret NAME") is left alone
_YAML_ASSIGNMENT = re.compile(
    r"(?<![\w-])((?:client_)?(?:password|passwd|secret))(:[ \t]+[\"']?)([^\s\"'&,;}<`-][^\s\"'&,;}]*)"
)

_SECRET_FLAG = re.compile(r"^--?[\w-]*(?:passw|token|secret|api-?key|credential)[\w-]*$", re.IGNORECASE)


def has_credentials(value: str) -> bool:
    """Whether a URL carries a ``user[:password]@`` part or a secret query value (what :func:`url` would hide)."""
    return url(value) != value.split("#", 1)[0] and "://" in value


def url(value: object) -> str:
    """``value`` (one URL) as it may be shown: no user name or password, and the value of every query parameter
    that could be a secret (a token, a presigned URL's signature, an upload's state) replaced by ``***``."""
    text = str(value)
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#]*@)?([^?#]*)(\?[^#]*)?(#.*)?$", text, re.DOTALL)
    if not m:
        return text
    scheme, _userinfo, rest, query, _fragment = m.groups()
    out = scheme + rest
    if query:
        parts = []
        for item in query[1:].split("&"):
            name, eq, _value = item.partition("=")
            parts.append(f"{name}={MASK}" if eq and _SECRET_PARAM.search(name) else item)
        out += "?" + "&".join(parts)
    return out


def _query(m: re.Match[str]) -> str:
    sep, name, value = m.groups()
    return f"{sep}{name}={MASK}" if value and _SECRET_PARAM.search(name) else m.group(0)


def _auth_header(m: re.Match[str]) -> str:
    lead, scheme = m.group(1), m.group(2)
    return f"{lead}{scheme} {MASK}" if scheme else f"{lead}{MASK}"


def text(value: object) -> str:
    """``value`` (any text: an error message, a log line, a traceback) with every secret this module knows the
    shape of replaced by ``***`` (module docstring). Text with none comes back unchanged."""
    s = str(value)
    if not s:
        return s
    s = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", s)
    s = _BARE_USERINFO.sub(f"{MASK}@", s)
    s = _QUERY_PAIR.sub(_query, s)
    s = _AUTH_HEADER.sub(_auth_header, s)
    s = _BARE_SCHEME.sub(lambda m: f"{m.group(1)} {MASK}", s)
    s = _ASSIGNMENT.sub(_assignment, s)
    return _YAML_ASSIGNMENT.sub(_assignment, s)


def _assignment(m: re.Match[str]) -> str:
    name, sep, value = m.group(1, 2, 3)
    return m.group(0) if value == MASK else f"{name}{sep}{MASK}"


def argv(cmd: list[str]) -> list[str]:
    """``cmd`` as it may be shown or logged: the value of a ``--password``/``--token``/... flag (either form,
    ``--flag V`` or ``--flag=V``) replaced by ``***``, and every other argument through :func:`text` (a URL
    with credentials, ``token=...``)."""
    out: list[str] = []
    hide = False
    for arg in cmd:
        if hide:
            out.append(MASK)
            hide = False
            continue
        name, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(name):
            if eq:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                hide = True
            continue
        out.append(text(arg))
    return out


class Lines:
    """A byte stream (a wrapped command's output) redacted line by line on its way into a log file: :meth:`feed`
    returns the complete lines ``chunk`` ends, each through :func:`text`, and keeps the unfinished rest;
    :meth:`flush` returns that rest (redacted) when the writer has gone quiet or the stream ended. Bytes that are
    not UTF-8 pass through as they were. A line longer than ``limit`` bytes is let out in pieces of ``limit``."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.pending = b""
        self.limit = limit

    def feed(self, chunk: bytes) -> bytes:
        self.pending += chunk
        head, nl, rest = self.pending.rpartition(b"\n")
        if not nl:
            if len(self.pending) < self.limit:
                return b""
            head, rest = self.pending[: self.limit], self.pending[self.limit :]
            self.pending = rest
            return _line(head)
        self.pending = rest
        return b"\n".join(_line(raw) for raw in (head + nl).split(b"\n"))

    def flush(self) -> bytes:
        out, self.pending = _line(self.pending), b""
        return out


def _line(raw: bytes) -> bytes:
    return text(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
