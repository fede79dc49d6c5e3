"""The container build context: ``FROM`` the spec's container, the toolchain installed into that image's own
Python without changing any package the image ships, the relocatable model repository (which carries its tokenizer) and
the entrypoint.

The context's layout is the image's ``/opt/toolchain`` (``image_root``)::

    Dockerfile
    entrypoint.sh                 pull by key → verify → lint → serve (docs/deploy.md)
    model_repository/             the Triton repository: engine paths under the engines root, the tokenizer
                                  in preprocessing/tokenizer
    src/                          the toolchain source (pyproject.toml, README.md, toolchain/)
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from toolchain.deploy.manifests import SERVER_UID
from toolchain.errors import DeployError

ENTRYPOINT = Path(__file__).with_name("entrypoint.sh")
SOURCE_ROOT = Path(__file__).resolve().parents[2]
_REF = re.compile(
    r"^(?P<repo>[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class ImageRef:
    repository: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def pinned_image(ref: str, what: str) -> ImageRef:
    """Parse an image reference that names an exact version: a tag other than ``latest``, or a digest."""
    m = _REF.match(ref.strip())
    if not m:
        raise DeployError(f"{what} '{ref}' is not an image reference", "use registry/repository:tag")
    tag, digest = m.group("tag"), m.group("digest")
    if digest is None and (tag is None or tag == "latest"):
        raise DeployError(
            f"{what} '{ref}' is not pinned ({'no tag' if tag is None else 'latest'} moves under you)",
            "give an exact tag such as nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3, or an @sha256 digest",
        )
    return ImageRef(m.group("repo"), tag, digest)


KUBESSH = Path(__file__).with_name("kubessh")
KUBECTL_APT = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"


def dockerfile(
    base: ImageRef,
    *,
    trtllm_version: str,
    image_root: str,
    engines_root: str,
    repository: bool = True,
    kubectl_minor: str | None = None,
    public_key: bool = False,
) -> str:
    """The Dockerfile text (every value quoted where the shell sees it; nothing left to substitute).
    ``kubectl_minor`` (e.g. "1.34") adds kubectl from the Kubernetes apt repository of that minor release, which
    the leader of a multi-node group uses to start ranks in its workers. ``public_key``: the context holds
    ``cosign.pub`` and every pull in the image requires a valid signature of it (TOOLCHAIN_VERIFY_KEY,
    docs/signing.md)."""
    root = image_root.rstrip("/")
    check = (
        'import importlib.metadata as m, sys; v = m.version("tensorrt_llm"); '
        f'sys.exit(0 if v == "{trtllm_version}" else "tensorrt_llm " + v + " in the image, not {trtllm_version}")'
    )
    extras = "/src[s3,hf,sign]" if public_key else "/src[s3,hf]"
    lines = [
        "# syntax=docker/dockerfile:1",
        "# Written by `toolchain deploy`: the spec's serving container plus the toolchain, the model repository",
        "# and an entrypoint that pulls and verifies the engine before serving (docs/deploy.md).",
        f"FROM {base}",
        "",
        "# The toolchain goes into the image's own Python. Every package the image already has is a constraint,",
        "# so pip can add what is missing (boto3, huggingface_hub, tritonclient...) but never replace",
        "# tensorrt_llm, torch, numpy or anything else NVIDIA ships.",
        f"COPY src {root}/src",
        f"RUN python3 -m pip list --format=freeze > {root}/image-constraints.txt \\",
        f"    && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -c {root}/image-constraints.txt \\",
        f"       {shlex.quote(root + extras)} 'tritonclient[grpc,http]' \\",
        f"    && python3 -c {shlex.quote(check)} \\",
        "    && python3 -m toolchain.cli.main --help > /dev/null",
        "",
        *([f"COPY model_repository {root}/model_repository"] if repository else []),
        f"COPY entrypoint.sh kubessh {root}/",
        *(
            [
                "# the engine's signature must verify with this key before the entrypoint serves it (docs/signing.md)",
                f"COPY cosign.pub {root}/cosign.pub",
            ]
            if public_key
            else []
        ),
        # the entrypoint finds the tokenizer in the repository (preprocessing/tokenizer) by default
        f"ENV TOOLCHAIN_MODEL_REPOSITORY={root}/model_repository \\",
        f"    ENGINES_ROOT={engines_root} \\",
        f"    TOOLCHAIN_CACHE={engines_root}/.toolchain-cache" + (" \\" if public_key else ""),
        *([f"    TOOLCHAIN_VERIFY_KEY={root}/cosign.pub"] if public_key else []),
        *(_kubectl(kubectl_minor) if kubectl_minor else []),
        "",
        "# the non-root user NGC's Triton images create for the server (triton-server, uid/gid 1000); the",
        "# manifests run the pod as it too (runAsUser), and everything copied above is readable by it",
        f"USER {SERVER_UID}:{SERVER_UID}",
        "EXPOSE 8000 8001 8002 9000",
        f'ENTRYPOINT ["{root}/entrypoint.sh"]',
        'CMD ["server"]',
        "",
    ]
    return "\n".join(lines)


def readable_by_all(root: Path) -> None:
    """Directories 0755, files 0644 (executables 0755) under ``root``: what the image's non-root user needs
    to read everything the Dockerfile copies in."""
    for p in [root, *root.rglob("*")]:
        if p.is_symlink():
            continue
        if p.is_dir():
            p.chmod(0o755)
        else:
            p.chmod(0o755 if p.stat().st_mode & 0o100 else 0o644)


def copy_source(dest: Path) -> None:
    """The toolchain source the image installs (a source checkout: pyproject.toml beside the package)."""
    if not (SOURCE_ROOT / "pyproject.toml").is_file():
        raise DeployError(
            f"no toolchain source checkout at {SOURCE_ROOT} (installed without pyproject.toml)",
            "run `toolchain deploy` from a clone of the toolchain repository",
        )
    dest.mkdir(parents=True)
    # what the wheel is built from: setup.py maps triton_repo/ into the package (the Python-backend model sources)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copyfile(SOURCE_ROOT / name, dest / name)
    for tree in ("toolchain", "triton_repo"):
        shutil.copytree(SOURCE_ROOT / tree, dest / tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _kubectl(minor: str) -> list[str]:
    repo = KUBECTL_APT.format(minor=minor)
    return [
        "",
        f"# kubectl {minor}: the group leader lists its pods and starts ranks in them (kubessh, Open MPI's rsh agent)",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "# The packages are not pinned to exact versions: curl and gnupg come from the base image's own Ubuntu",
        "# release, which NVIDIA moves with each container, and kubectl from a repository of one Kubernetes minor.",
        "# hadolint ignore=DL3008",
        "RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl gnupg \\",
        f"    && curl -fsSL {repo}Release.key | gpg --dearmor -o /usr/share/keyrings/kubernetes.gpg \\",
        f"    && echo 'deb [signed-by=/usr/share/keyrings/kubernetes.gpg] {repo} /' \\",
        "       > /etc/apt/sources.list.d/kubernetes.list \\",
        "    && apt-get update && apt-get install -y --no-install-recommends kubectl && rm -rf /var/lib/apt/lists/*",
    ]
