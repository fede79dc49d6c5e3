"""The shape of ``toolchain/registry/oci/``, held: other modules use only its public names, OCI-only capabilities are
found by type (the protocols of ``toolchain/registry/capabilities.py``), never by ``getattr`` on a backend, and no
file of the package grows past a size one can read."""

from __future__ import annotations

import ast
from pathlib import Path

import toolchain.registry.oci
from toolchain.registry.capabilities import ResolvesManifestDigests, StoresSignatures

PACKAGE = Path(__file__).resolve().parents[2] / "toolchain"
OCI = PACKAGE / "registry" / "oci"
REGISTRY = PACKAGE / "registry"
MAX_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def oci_internals_used(files: list[Path], public: set[str]) -> list[str]:
    """``file:line name`` of every import of ``toolchain.registry.oci``'s internals from outside the package: a
    submodule, or a name the package does not export (relative imports resolved)."""
    bad = []
    for path in files:
        if OCI in path.parents:
            continue
        module = _module(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                bad += [f"{where} {a.name}" for a in node.names if a.name.startswith("toolchain.registry.oci.")]
            elif isinstance(node, ast.ImportFrom):
                name = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = parts[: len(parts) - node.level + 1]
                    name = ".".join([*base, node.module] if node.module else base)
                if name.startswith(("toolchain.registry.oci.", "toolchain.registry.oci_")):
                    bad.append(f"{where} {name}")
                elif name == "toolchain.registry.oci":
                    bad += [f"{where} {name}.{a.name}" for a in node.names if a.name not in public]
                elif name == "toolchain.registry":
                    bad += [f"{where} {name}.{a.name}" for a in node.names if a.name.startswith("oci_")]
    return bad


def getattr_on_a_backend(files: list[Path]) -> list[str]:
    """``file:line`` of every ``getattr(x, ...)`` whose ``x`` (a name or an attribute) names a backend."""
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
                continue
            target = node.args[0] if node.args else None
            if isinstance(target, (ast.Name, ast.Attribute)) and "backend" in ast.unparse(target).lower():
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    return bad


def long_files(folder: Path, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{p.relative_to(PACKAGE.parent)}: {n} lines"
        for p in sorted(folder.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > limit
    ]


def test_no_module_outside_the_package_imports_an_oci_internal() -> None:
    public = set(toolchain.registry.oci.__all__)
    assert {"OCIBackend", "parse_oci_url"} <= public
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    assert oci_internals_used(files, public) == []


def test_no_getattr_on_a_backend_in_the_registry() -> None:
    assert getattr_on_a_backend(sorted(REGISTRY.rglob("*.py"))) == []


def test_every_file_of_the_oci_package_is_at_most_600_lines() -> None:
    assert len(list(OCI.glob("*.py"))) >= 5
    assert long_files(OCI) == []


def test_the_oci_backend_has_its_capabilities_by_type(tmp_path: Path) -> None:
    from toolchain.registry.backends import LocalBackend

    b = toolchain.registry.oci.OCIBackend("registry.example", "team/engines")
    assert isinstance(b, StoresSignatures) and isinstance(b, ResolvesManifestDigests)
    local = LocalBackend(tmp_path)
    assert not isinstance(local, StoresSignatures) and not isinstance(local, ResolvesManifestDigests)


def test_the_checks_see_what_they_must_refuse(tmp_path: Path) -> None:
    """Each rule on a file that breaks it, written where the package would hold it."""
    global PACKAGE, OCI
    fake = tmp_path / "toolchain"
    (fake / "registry" / "oci").mkdir(parents=True)
    (fake / "registry" / "oci" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (fake / "registry" / "oci" / "ok.py").write_text("from toolchain.registry.oci.big import x\n")
    (fake / "registry" / "store.py").write_text(
        "from toolchain.registry.oci.blobs import Tries\n"
        "from toolchain.registry.oci import OCIBackend, CHUNK\n"
        "from .oci import mapping\n"
        "import toolchain.registry.oci.transport\n"
        "from toolchain.registry.oci_auth import Credentials\n"
        "def f(self, reg):\n"
        "    getattr(self.backend, 'x', None)\n"
        "    getattr(reg.backend, 'y')\n"
        "    getattr(backend, 'z')\n"
        "    getattr(self.client, 'w')\n"
    )
    saved = PACKAGE, OCI
    PACKAGE, OCI = fake, fake / "registry" / "oci"
    try:
        files = sorted(fake.rglob("*.py"))
        used = oci_internals_used(files, {"OCIBackend", "parse_oci_url"})
        assert len(used) == 5 and all("store.py" in u for u in used), used
        assert len(getattr_on_a_backend(files)) == 3
        assert long_files(OCI) == ["toolchain/registry/oci/big.py: 601 lines"]
    finally:
        PACKAGE, OCI = saved
