"""Where NVIDIA Dynamo's own Python environment is.

Dynamo 1.6.1 pins packages the toolchain pins differently (transformers, pydantic, kubernetes < 33), so it
lives in its own virtualenv, ``.venv-dynamo`` (``scripts/setup-dynamo.sh``, which ``scripts/setup.sh`` runs),
and the toolchain starts its processes with that interpreter. Found, in order: ``TOOLCHAIN_DYNAMO_PYTHON``,
the repository's ``.venv-dynamo/bin/python``, a ``python3`` on ``PATH`` that has the ``dynamo`` package.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

from toolchain import settings
from toolchain.errors import DynamoMissingError
from toolchain.proc import capture

DYNAMO_VERSION = "1.6.1"
REPO = Path(__file__).resolve().parents[2]
_PROBE = (
    "import importlib.metadata as m, importlib.util as u; "
    "assert u.find_spec('dynamo.frontend') and u.find_spec('dynamo.mocker'); print(m.version('ai-dynamo'))"
)


def _candidates() -> list[tuple[str, str]]:
    """(interpreter, where it came from) in the order they are tried."""
    configured = settings.dynamo_python()
    if configured:
        return [(configured, f"TOOLCHAIN_DYNAMO_PYTHON={configured}")]
    out = [(str(REPO / ".venv-dynamo" / "bin" / "python"), "the repository's .venv-dynamo")]
    on_path = shutil.which("python3")
    if on_path:
        out.append((on_path, f"python3 on PATH ({on_path})"))
    return out


@cache
def _probe(python: str) -> str | None:
    """The ai-dynamo version ``python`` has, or None when it cannot run Dynamo's frontend and mocker."""
    if not Path(python).is_file():
        return None
    r = capture([python, "-c", _PROBE], timeout=30)
    return r.stdout.strip() if r.ok else None


def dynamo_python() -> str:
    """The interpreter of an environment with ai-dynamo 1.6.1 installed; exit 3 with the install hint if none."""
    tried = []
    for python, where in _candidates():
        version = _probe(python)
        if version == DYNAMO_VERSION:
            return python
        tried.append(f"{where}: " + (f"ai-dynamo {version}" if version else "no Dynamo"))
    raise DynamoMissingError(
        f"NVIDIA Dynamo {DYNAMO_VERSION} is not installed ({'; '.join(tried)})",
        "run scripts/setup-dynamo.sh (it makes .venv-dynamo), or set TOOLCHAIN_DYNAMO_PYTHON to the python of an "
        f"environment with ai-dynamo=={DYNAMO_VERSION}",
    )
