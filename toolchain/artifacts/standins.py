"""Which local address a stand-in serves on, for the server that cannot say so itself.

The toolchain's own stand-in server answers with a header (``toolchain.bench.standin.HEADER``); the Dynamo
frontend in front of the Dynamo mocker cannot. `toolchain dynamo up` therefore records, while it runs, one file
per address in this machine's runtime directory (``$XDG_RUNTIME_DIR/toolchain/stand-ins``, else
``/tmp/toolchain-UID/stand-ins``, made private to the user; not the cache, which another ``$TOOLCHAIN_CACHE``
would not see): what serves there and the pid of the process that started it.
`toolchain bench` reads it, so a measurement of the mocker names it ("served by ...") and carries it in its
provenance (which `toolchain plan --measured` refuses to size a fleet from). A record whose process is gone is
stale and ignored (and removed).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from toolchain import settings


def _root() -> Path:
    return settings.runtime_dir() / "stand-ins"


def _address(url: str) -> str | None:
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:  # not a URL (an unclosed [, a port that is no number)
        return None
    if host == "localhost":
        host = "127.0.0.1"
    if not host or port is None:
        return None
    return f"{host.replace(':', '_')}_{port}"


def _path(url: str) -> Path | None:
    address = _address(url)
    return _root() / f"{address}.json" if address else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def serving(url: str, reference: str) -> Iterator[None]:
    """Record that ``reference`` serves at ``url`` for as long as the block runs."""
    path = _path(url)
    if path is None:
        yield
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"url": url, "reference": reference, "pid": os.getpid()}))
    tmp.replace(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


def lookup(url: str) -> str | None:
    """What stand-in serves at ``url``, if a live `toolchain dynamo up` (or the like) recorded one."""
    path = _path(url)
    if path is None or not path.is_file():
        return None
    try:
        if path.stat().st_uid != os.getuid():  # only this user's own records: /tmp is shared
            return None
        rec = json.loads(path.read_text())
        pid, reference = int(rec["pid"]), str(rec["reference"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return reference
