"""Every environment variable the toolchain reads, with its default, in one place.

Each value is read when it is asked for (never at import time), so a test or a caller that changes the
environment is seen by the next call. Nothing else in ``toolchain/`` reads ``os.environ``.

=============================  =======================  =====================================================
variable                       default                  meaning
=============================  =======================  =====================================================
``TOOLCHAIN_CACHE``            ``~/.cache/toolchain``   root of the local cache (layout: ``toolchain.artifacts``)
``TOOLCHAIN_REGISTRY``         (none)                   registry URL used when ``--registry`` is not given;
                                                        without either, ``$TOOLCHAIN_CACHE/registry``
``TOOLCHAIN_DEBUG``            (none)                   ``1``: print the traceback (and its cause) of an error, and
                                                        log each HTTP request and child process on stderr
                                                        (docs/http.md; never a credential)
``TOOLCHAIN_S3_ENDPOINT_URL``  ``$AWS_ENDPOINT_URL``    endpoint of an S3-compatible store for ``s3://`` URLs
``TOOLCHAIN_OCI_PLAIN_HTTP``   (none)                   ``1``: talk plain HTTP to ``oci://`` registries (ORAS's
                                                        ``--plain-http``); HTTPS otherwise
``TOOLCHAIN_OCI_USERNAME``     (none)                   user name for ``oci://`` registries (with the password; else
                                                        the Docker config: ``$DOCKER_CONFIG``, ``~/.docker``)
``TOOLCHAIN_OCI_PASSWORD``     (none)                   password or access token for ``oci://`` (never printed)
``TOOLCHAIN_HTTP_CONNECT_TIMEOUT``  ``5``           seconds to connect to a registry (``oci://``, ``s3://``,
                                                        ``hf://``) or any HTTP service (toolchain/http.py) before
                                                        giving up
``TOOLCHAIN_HTTP_READ_TIMEOUT``     ``30``          seconds a registry (``oci://``, ``s3://``, ``hf://``) may send
                                                        nothing before the request counts as stalled (retried,
                                                        then one-line error; ``oci://``: see the next line)
``TOOLCHAIN_OCI_STALL_TIMEOUT``     ``20``          seconds an ``oci://`` registry may send nothing (at most the
                                                        read timeout) before the command ends with ``registry HOST
                                                        stopped answering``: a stall is not retried
``TOOLCHAIN_S3_STALL_TIMEOUT``      ``20``          seconds an ``s3://`` endpoint may send nothing (at most the read
                                                        timeout) before the command ends with ``S3 endpoint HOST
                                                        stopped answering``: a stall is not retried
``TOOLCHAIN_HF_STALL_TIMEOUT``      ``20``          seconds the Hugging Face Hub may send nothing (caps the
                                                        library's ``HF_HUB_ETAG_TIMEOUT``/``HF_HUB_DOWNLOAD_TIMEOUT``)
                                                        before the command ends with ``the Hugging Face Hub (HOST)
                                                        stopped answering``: a stall is not retried
``TOOLCHAIN_SIGNING_KEY``      (none)                   private key ``cache push`` signs entries with (``--sign``)
``TOOLCHAIN_SIGNING_PASSWORD`` ``$COSIGN_PASSWORD``     password of an encrypted signing key (never printed)
``TOOLCHAIN_VERIFY_KEY``       (none)                   public key pulls require a valid signature of (``--public-key``)
``TOOLCHAIN_CONTAINER_IMAGE``  (none)                   container image recorded in build provenance
``TRTLLM_ROOT``                ``/app/tensorrt_llm``    TensorRT-LLM source tree (its ``convert_checkpoint.py``)
``TOOLCHAIN_DYNAMO_PYTHON``    (see meaning)            Python of NVIDIA Dynamo's environment; default the repo's
                                                        ``.venv-dynamo/bin/python``, else ``python`` on PATH that
                                                        imports ``dynamo.frontend``
=============================  =======================  =====================================================

Kubernetes sets ``JOB_COMPLETION_INDEX`` in each pod of an Indexed Job; `toolchain job` reads it (through
``job_completion_index``) to know which cell of the index file the pod builds (docs/cluster-builds.md).

Third-party libraries read their own variables (``HF_HOME``, ``HF_TOKEN``, ``AWS_*``); the toolchain passes
them through untouched. For ``oci://`` registries it reads Docker's ``DOCKER_CONFIG`` (the directory of
``config.json``) as the Docker CLI and ORAS do. It reads two of huggingface_hub's to decide, before a
download, whether the Hub may be asked at all: ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, the default when unset or empty, and what it means."""

    name: str
    default: str | None
    help: str

    def get(self) -> str | None:
        value = os.environ.get(self.name)
        return value if value else self.default


CACHE = Setting("TOOLCHAIN_CACHE", None, "root of the local cache (default ~/.cache/toolchain)")
REGISTRY = Setting("TOOLCHAIN_REGISTRY", None, "registry URL used when --registry is not given")
DEBUG = Setting("TOOLCHAIN_DEBUG", None, "1: print the traceback of an error; log HTTP requests and child processes")
S3_ENDPOINT = Setting("TOOLCHAIN_S3_ENDPOINT_URL", None, "S3-compatible endpoint for s3:// registries")
AWS_ENDPOINT = Setting("AWS_ENDPOINT_URL", None, "fallback S3 endpoint (the AWS SDKs' own variable)")
OCI_PLAIN_HTTP = Setting("TOOLCHAIN_OCI_PLAIN_HTTP", None, "1: plain HTTP to oci:// registries (else HTTPS)")
OCI_USERNAME = Setting("TOOLCHAIN_OCI_USERNAME", None, "user name for oci:// registries (else the Docker config)")
OCI_PASSWORD = Setting("TOOLCHAIN_OCI_PASSWORD", None, "password or token for oci:// registries (never printed)")
OCI_STALL_TIMEOUT = Setting(
    "TOOLCHAIN_OCI_STALL_TIMEOUT", "20", "seconds an oci:// registry may send nothing before it is named stopped"
)
S3_STALL_TIMEOUT = Setting(
    "TOOLCHAIN_S3_STALL_TIMEOUT", "20", "seconds an s3:// endpoint may send nothing before it is named stopped"
)
HF_STALL_TIMEOUT = Setting(
    "TOOLCHAIN_HF_STALL_TIMEOUT", "20", "seconds the Hugging Face Hub may send nothing before it is named stopped"
)
DOCKER_CONFIG = Setting("DOCKER_CONFIG", None, "Docker's own: the directory of config.json (read, not set, here)")
HTTP_CONNECT_TIMEOUT = Setting("TOOLCHAIN_HTTP_CONNECT_TIMEOUT", "5", "seconds to connect to a registry")
HTTP_READ_TIMEOUT = Setting("TOOLCHAIN_HTTP_READ_TIMEOUT", "30", "seconds a registry may send nothing (stalled)")
SIGNING_KEY = Setting("TOOLCHAIN_SIGNING_KEY", None, "private key file cache push signs with (--sign)")
SIGNING_PASSWORD = Setting("TOOLCHAIN_SIGNING_PASSWORD", None, "password of an encrypted signing key (never printed)")
COSIGN_PASSWORD = Setting("COSIGN_PASSWORD", None, "cosign's own: the key password (read, not set, here)")
VERIFY_KEY = Setting("TOOLCHAIN_VERIFY_KEY", None, "public key file every pull requires a signature of")
CONTAINER_IMAGE = Setting("TOOLCHAIN_CONTAINER_IMAGE", None, "container image recorded in build provenance")
TRTLLM_ROOT = Setting("TRTLLM_ROOT", "/app/tensorrt_llm", "TensorRT-LLM source tree (convert_checkpoint.py)")
DYNAMO_PYTHON = Setting("TOOLCHAIN_DYNAMO_PYTHON", None, "Python of NVIDIA Dynamo's own environment (.venv-dynamo)")
AIC_PYTHON = Setting("TOOLCHAIN_AIC_PYTHON", None, "Python of NVIDIA AIConfigurator's own environment (.venv-aic)")
HF_OFFLINE = Setting("HF_HUB_OFFLINE", None, "huggingface_hub's own switch: no network (read, not set, here)")
HF_ENDPOINT = Setting("HF_ENDPOINT", None, "huggingface_hub's own Hub URL (read, not set, here)")
JOB_COMPLETION_INDEX = Setting("JOB_COMPLETION_INDEX", None, "Kubernetes' own: an Indexed Job pod's index")
XDG_RUNTIME_DIR = Setting("XDG_RUNTIME_DIR", None, "the user's runtime directory (read, not set, here)")

ALL: tuple[Setting, ...] = (
    CACHE,
    REGISTRY,
    DEBUG,
    S3_ENDPOINT,
    AWS_ENDPOINT,
    OCI_PLAIN_HTTP,
    OCI_USERNAME,
    OCI_PASSWORD,
    DOCKER_CONFIG,
    HTTP_CONNECT_TIMEOUT,
    HTTP_READ_TIMEOUT,
    OCI_STALL_TIMEOUT,
    S3_STALL_TIMEOUT,
    HF_STALL_TIMEOUT,
    SIGNING_KEY,
    SIGNING_PASSWORD,
    COSIGN_PASSWORD,
    VERIFY_KEY,
    CONTAINER_IMAGE,
    TRTLLM_ROOT,
    DYNAMO_PYTHON,
    HF_OFFLINE,
    HF_ENDPOINT,
    JOB_COMPLETION_INDEX,
    XDG_RUNTIME_DIR,
)


def runtime_dir() -> Path:
    """Where live processes leave their records (toolchain.artifacts.standins): ``$XDG_RUNTIME_DIR/toolchain``,
    else ``/tmp/toolchain-UID``."""
    value = XDG_RUNTIME_DIR.get()
    return Path(value) / "toolchain" if value else Path("/tmp") / f"toolchain-{os.getuid()}"


def cache_home() -> Path:
    """Root of the local cache."""
    value = CACHE.get()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "toolchain"


def registry_url() -> str | None:
    """The registry URL from the environment, or None for the local default."""
    return REGISTRY.get()


def debug() -> bool:
    return DEBUG.get() == "1"


def s3_endpoint_url() -> str | None:
    return S3_ENDPOINT.get() or AWS_ENDPOINT.get()


def oci_plain_http() -> bool:
    return OCI_PLAIN_HTTP.get() == "1"


def _seconds(s: Setting) -> float:
    raw = s.get() or "0"
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{s.name}={raw!r} is not a positive number of seconds")
    return value


def oci_stall_timeout() -> float:
    """Seconds an oci:// registry may send nothing, once, before the command ends; ValueError names a bad value."""
    return _seconds(OCI_STALL_TIMEOUT)


def s3_stall_timeout() -> float:
    """Seconds an s3:// endpoint may send nothing, once, before the command ends; ValueError names a bad value."""
    return _seconds(S3_STALL_TIMEOUT)


def hf_stall_timeout() -> float:
    """Seconds the Hugging Face Hub may send nothing, once, before the command ends; ValueError names a bad value."""
    return _seconds(HF_STALL_TIMEOUT)


def http_timeouts() -> tuple[float, float]:
    """(connect, read) seconds for the registry HTTP clients; ValueError names a bad setting."""
    return _seconds(HTTP_CONNECT_TIMEOUT), _seconds(HTTP_READ_TIMEOUT)


def oci_credentials() -> tuple[str, str] | None:
    """(user, password) for oci:// registries from the environment, or None when either is unset."""
    user, password = OCI_USERNAME.get(), OCI_PASSWORD.get()
    return (user, password) if user and password else None


def docker_config_dir() -> Path:
    """Where Docker (and ORAS) keep ``config.json``: ``$DOCKER_CONFIG``, else ``~/.docker``."""
    value = DOCKER_CONFIG.get()
    return Path(value).expanduser() if value else Path.home() / ".docker"


def container_image() -> str | None:
    return CONTAINER_IMAGE.get()


def hf_offline(default: bool) -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it; ``default`` is the library's value when it is unset."""
    value = os.environ.get(HF_OFFLINE.name)
    return value.upper() in ("1", "ON", "YES", "TRUE") if value is not None else default


def hf_endpoint(default: str) -> str:
    return HF_ENDPOINT.get() or default


def trtllm_root() -> Path:
    return Path(TRTLLM_ROOT.get() or "/app/tensorrt_llm")


def dynamo_python() -> str | None:
    """``TOOLCHAIN_DYNAMO_PYTHON`` when set (None: look in the default places, toolchain.dynamo.env)."""
    return DYNAMO_PYTHON.get()


def job_completion_index() -> str | None:
    """``JOB_COMPLETION_INDEX``, which Kubernetes sets in each pod of an Indexed Job (None outside one)."""
    return JOB_COMPLETION_INDEX.get()


def aic_python() -> str | None:
    """``TOOLCHAIN_AIC_PYTHON`` when set (None: the repository's ``.venv-aic``, toolchain.planning.estimate)."""
    return AIC_PYTHON.get()


def signing_key() -> str | None:
    return SIGNING_KEY.get()


def signing_password() -> str | None:
    """The signing key's password: ``TOOLCHAIN_SIGNING_PASSWORD``, else cosign's ``COSIGN_PASSWORD``."""
    return SIGNING_PASSWORD.get() or COSIGN_PASSWORD.get()


def verify_key() -> str | None:
    return VERIFY_KEY.get()
