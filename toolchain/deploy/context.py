"""The container build context: ``FROM`` the spec's container, the toolchain installed into that image's own
Python without changing any package the image ships, the relocatable model repository (which carries its tokenizer) and
the entrypoint.

The context's layout is the image's ``/opt/toolchain`` (``image_root``)::

    Dockerfile
    entrypoint.sh                 pull by key → verify → lint → serve (docs/deploy.md)
    model_repository/             the Triton repository: engine paths under the engines root, the tokenizer
                                  in preprocessing/tokenizer
    src/                          the toolchain source: a checkout's pyproject.toml, setup.py, README.md,
                                  toolchain/ and triton_repo/; or, from an installed wheel, its package
                                  directory and a pyproject.toml written from its metadata (copy_source)
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from toolchain.deploy.manifests import SERVER_UID
from toolchain.errors import DeployError

ENTRYPOINT = Path(__file__).with_name("entrypoint.sh")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # toolchain/, in a checkout or installed
SOURCE_ROOT = PACKAGE_DIR.parent
_CACHES = shutil.ignore_patterns("__pycache__", "*.pyc")
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
    """The toolchain source the image installs, from whichever toolchain is running: a source checkout's own
    build files (pyproject.toml, setup.py, README.md, toolchain/, triton_repo/), or, for an installed
    distribution (the wheel), its package directory plus a pyproject.toml written from its metadata."""
    if (SOURCE_ROOT / "pyproject.toml").is_file() and (SOURCE_ROOT / "triton_repo").is_dir():
        _copy_checkout(SOURCE_ROOT, dest)
    else:
        _copy_installed(PACKAGE_DIR, _installed_distribution(PACKAGE_DIR), dest)


def _copy_checkout(root: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    # what the wheel is built from: setup.py maps triton_repo/ into the package (the Python-backend model sources)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copyfile(root / name, dest / name)
    for tree in ("toolchain", "triton_repo"):
        shutil.copytree(root / tree, dest / tree, ignore=_CACHES)


def _installed_distribution(package: Path) -> Distribution:
    """The installed distribution whose files are ``package`` (refused when the metadata found belongs elsewhere:
    a stale install beside sources run from PYTHONPATH)."""
    try:
        dist = distribution("toolchain")
        init = Path(str(dist.locate_file("toolchain/__init__.py"))).resolve()
    except PackageNotFoundError:
        init = None
    if init != (package / "__init__.py").resolve():
        raise DeployError(
            f"the toolchain at {package} is neither a source checkout nor an installed distribution",
            "install it (`pip install toolchain-*.whl`, or `pip install -e .` in a clone) and run `toolchain deploy`",
        )
    return dist


def _copy_installed(package: Path, dist: Distribution, dest: Path) -> None:
    """``package`` as installed (its modules and package data) and a pyproject.toml that rebuilds the same
    distribution: name, version, dependencies, extras and console scripts from ``dist``'s metadata, and every
    file of the copied tree listed, so pip installs exactly these files."""
    dest.mkdir(parents=True)
    shutil.copytree(package, dest / "toolchain", ignore=_CACHES)
    (dest / "pyproject.toml").write_text(pyproject_for(dist, dest))


def pyproject_for(dist: Distribution, src: Path) -> str:
    """A pyproject.toml for the installed-layout tree ``src`` (``src/toolchain/...``), from ``dist``'s metadata.

    Packages are the directories holding ``__init__.py``; every other file is package data of the nearest such
    directory above it (the Triton model sources under ``triton_repo/`` are data of ``toolchain``)."""
    meta = dist.metadata
    extras: dict[str, list[str]] = {name: [] for name in meta.get_all("Provides-Extra") or []}
    deps: list[str] = []
    for line in meta.get_all("Requires-Dist") or []:
        req, extra = _split_extra(line)
        (deps if extra is None else extras.setdefault(extra, [])).append(req)
    packages, data = _packages_and_data(src / "toolchain")
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    q = json.dumps  # a JSON string or list of strings is a valid TOML value
    project = [f"name = {q(meta['Name'])}", f"version = {q(meta['Version'])}"]
    for key, field in (("description", "Summary"), ("requires-python", "Requires-Python")):
        if meta[field]:
            project.append(f"{key} = {q(meta[field])}")
    if meta["License-Expression"]:
        project.append(f"license = {q(meta['License-Expression'])}")
    project.append(f"dependencies = {q(deps)}")
    lines = [
        f"# Written by `toolchain deploy` from the installed distribution {meta['Name']} {meta['Version']}:",
        "# its own files (toolchain/) and metadata, so pip installs in the image what runs here.",
        "[build-system]",
        'requires = ["setuptools>=68"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        *project,
        "",
        "[project.optional-dependencies]",
        *(f"{q(name)} = {q(reqs)}" for name, reqs in extras.items()),
        "",
        "[project.scripts]",
        *(f"{q(name)} = {q(value)}" for name, value in scripts.items()),
        "",
        "[tool.setuptools]",
        f"packages = {q(packages)}",
        "include-package-data = false",
        "",
        "[tool.setuptools.package-data]",
        *(f"{q(pkg)} = {q(files)}" for pkg, files in data.items()),
        "",
    ]
    return "\n".join(lines)


_EXTRA = re.compile(r"""^(?:(?P<before>.*?)\s+and\s+)?extra\s*==\s*["'](?P<name>[^"']+)["']$""")


def _split_extra(requirement: str) -> tuple[str, str | None]:
    """``'boto3; extra == "s3"'`` -> ``('boto3', 's3')``; a requirement without an extra -> ``(it, None)``.
    Any other condition stays as the requirement's marker (setuptools writes ``<marker> and extra == "x"``)."""
    req, _, marker = (part.strip() for part in requirement.partition(";"))
    m = _EXTRA.match(marker)
    if m is None:
        return requirement.strip(), None
    before = m.group("before")
    return (f"{req}; {before}" if before else req), m.group("name")


def _packages_and_data(package: Path) -> tuple[list[str], dict[str, list[str]]]:
    root = package.parent
    is_package = {d for d in [package, *package.rglob("*")] if d.is_dir() and (d / "__init__.py").is_file()}
    data: dict[str, list[str]] = {}
    for f in sorted(p for p in package.rglob("*") if p.is_file()):
        owner = next(d for d in f.parents if d in is_package)  # the package itself holds __init__.py
        if f.parent == owner and f.suffix == ".py":
            continue  # a module of its package
        name = ".".join(owner.relative_to(root).parts)
        data.setdefault(name, []).append(f.relative_to(owner).as_posix())
    return sorted(".".join(d.relative_to(root).parts) for d in is_package), data


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
