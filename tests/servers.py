"""The servers tests (and the benchmarks) start on 127.0.0.1: a free port, moto's S3, and CNCF distribution
(Debian's `docker-registry` package) as an OCI registry.

Never a system service: a process of our own on a free port, with its storage in a temp directory and a
config file written here; bounded start-up; stopped by the caller. ``scripts/setup.sh`` installs the packages.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/", timeout=1)
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start; see {log}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


BINARY = "docker-registry"  # Debian's name for distribution's `registry` binary


@dataclass
class RegistryServer:
    proc: subprocess.Popen[bytes]
    host: str  # 127.0.0.1:PORT
    root: Path  # filesystem storage root
    config: Path
    log: Path

    def url(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def blob_data(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes (distribution's storage layout)."""
        algo, hexd = digest.split(":", 1)
        return self.root / "docker" / "registry" / "v2" / "blobs" / algo / hexd[:2] / hexd / "data"

    def garbage_collect(self) -> str:
        """Distribution's own gc (``--delete-untagged``): what reclaims unreferenced blobs on this registry."""
        r = subprocess.run(
            [BINARY, "garbage-collect", "--delete-untagged", str(self.config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"registry garbage-collect failed: {r.stderr[-500:]}")
        return r.stdout

    def stop(self) -> None:
        stop(self.proc)


def available() -> bool:
    return shutil.which(BINARY) is not None


def write_config(root: Path, port: int, *, auth: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = root.parent / f"{root.name}-config.yml"
    cfg.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\n"
        "  maintenance:\n    uploadpurging:\n      enabled: false\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: toolchain-tests\n" + auth
    )
    return cfg


def start_registry(workdir: Path, *, auth: str = "", timeout_s: float = 30.0) -> RegistryServer:
    """A fresh registry with empty storage under ``workdir``; ``auth``: an extra YAML ``auth:`` section."""
    if not available():
        raise RuntimeError(f"{BINARY} is not installed (scripts/setup.sh installs Debian's docker-registry)")
    port = free_port()
    root = workdir / f"registry-{port}"
    cfg = write_config(root, port, auth=auth)
    log = workdir / f"registry-{port}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [BINARY, "serve", str(cfg)], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    host = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://{host}/v2/", timeout=1)
            break
        except urllib.error.HTTPError:  # 401 with auth configured: it is up
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"docker-registry did not start; see {log}") from None
            time.sleep(0.1)
    return RegistryServer(proc, host, root, cfg, log)
