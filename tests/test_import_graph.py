"""The shape of the package, held: stages side by side, every import pointing down.

Layers, bottom to top (a module may import its own package and any lower layer, never a higher one):

    0  base       toolchain/__init__, errors, settings, digest, proc, http, logs, redact, progress, units, _deps,
                  watchdog, outdir, hub, waits
    1  hardware   GPU catalog and detection
    2  specs      spec models, loader, matrix cells, rules, what a cell's options resolve to
    3  artifacts  identity and location: keys, recipe, cache layout, quantized-checkpoint format; the records
                  stages meet through (the cell plan, the diagnosis rule table)
    4  stages     planning, quantize, compile, registry, triton, deploy, bench, diagnose: never each other
    5  pipeline   the only place that runs stages in order (and dynamo: plan, deploy and a local run for NVIDIA
                  Dynamo, in its own package)
    6  cli        the Typer layer (nothing else imports typer)

Every import counts, including those inside functions (lazy imports) and relative ones.

Inside a package there are no circles either: a module that imports another module of its package (lazily or not)
is never imported back by it, directly or through others. Imports under ``if TYPE_CHECKING:`` do not run, so a circle
that only type annotations close is no circle at run time; it is still one in the design (two modules that each need
the other's types), so no package holds one of those either.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "toolchain"
BASE = {
    "__init__",
    "errors",
    "settings",
    "digest",
    "proc",
    "progress",
    "units",
    "_deps",
    "http",
    "logs",
    "redact",
    "watchdog",
    "outdir",
    "hub",
    "waits",
}
STAGES = {"planning", "quantize", "compile", "registry", "triton", "deploy", "bench", "diagnose"}
RANK = {"hardware": 1, "specs": 2, "artifacts": 3, **dict.fromkeys(STAGES, 4), "pipeline": 5, "dynamo": 5, "cli": 6}


def _unit(module: str) -> str:
    """toolchain.<unit>...: the package (or top-level module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(unit: str) -> int:
    if unit in BASE:
        return 0
    assert unit in RANK, f"toolchain.{unit} has no layer: add it to tests/test_import_graph.py"
    return RANK[unit]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from X import ...`` names, relative imports resolved against ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, relative ones resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = _from_module(node, package)
            out.append((node.lineno, name))
            if name == "toolchain":  # from toolchain import settings, pipeline
                out += [(node.lineno, f"toolchain.{a.name}") for a in node.names if a.name in RANK or a.name in BASE]
    return out


def violations(files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        src = _module_name(path)
        if src == "toolchain":
            continue
        here = _unit(src)
        for line, name in imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if name.split(".")[0] == "typer" and here != "cli":
                bad.append(f"{where}: imports typer outside toolchain/cli")
            if not name.startswith("toolchain.") or name == "toolchain":
                continue
            there = _unit(name)
            if there in ("__init__", here) or (there in BASE and here in BASE):
                continue
            if _rank(there) > _rank(here):
                bad.append(f"{where}: {src} imports {name} (upward: {here} -> {there})")
            elif _rank(there) == _rank(here) and here in STAGES:
                bad.append(f"{where}: {src} imports {name} (stage {here} -> stage {there})")
    return bad


def test_no_upward_or_sibling_stage_imports() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    assert violations(files) == []


def test_the_checker_sees_lazy_relative_and_upward_imports(tmp_path: Path) -> None:
    """The rule itself, on files it must refuse (written where the package would hold them)."""
    cases = {
        "compile/lazy.py": "def f():\n    from toolchain.quantize.run import quantize\n",
        "triton/rel.py": "from ..registry import open_registry\n",
        "specs/up.py": "import toolchain.planning.plan\n",
        "bench/cli.py": "from toolchain.cli.render import err\n",
        "registry/t.py": "import typer\n",
        "artifacts/p.py": "from toolchain import pipeline\n",
    }
    fake = tmp_path / "toolchain"
    for rel, text in cases.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    global PACKAGE
    saved, PACKAGE = PACKAGE, fake
    try:
        bad = violations(sorted(fake.rglob("*.py")))
    finally:
        PACKAGE = saved
    assert len(bad) == len(cases), bad
    fine = fake / "compile" / "ok.py"
    fine.write_text("from toolchain.artifacts.cell import for_cell\nfrom . import lazy\nimport json\n")
    PACKAGE = fake
    try:
        assert violations([fine]) == []
    finally:
        PACKAGE = saved


def _runtime_edges(path: Path, modules: set[str], *, typing: bool = False) -> set[str]:
    """The package's own modules this file imports when it runs (lazy ones included, TYPE_CHECKING ones only when
    ``typing``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if (
            not typing
            and isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        ):
            typing_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            name = _from_module(node, package)
            for a in node.names:  # `from pkg import mod` names a module; `from mod import f` the module itself
                out.add(f"{name}.{a.name}" if f"{name}.{a.name}" in modules else name)
    return {m for m in out if m in modules and m != module}


def circles(files: list[Path], *, typing: bool = False) -> list[list[str]]:
    """Import circles among modules of one package (Tarjan's strongly connected components, size > 1); ``typing``:
    imports under ``if TYPE_CHECKING:`` count too."""
    names = {_module_name(p): p for p in files}
    graph = {
        m: {e for e in _runtime_edges(p, set(names), typing=typing) if _unit(e) == _unit(m)} for m, p in names.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_inside_a_package() -> None:
    assert circles(sorted(PACKAGE.rglob("*.py"))) == []


def test_no_import_circle_inside_a_package_even_through_type_checking_imports() -> None:
    """The last ones (measured before): toolchain/specs' models <-> dynamo, lora, speculative, whose whole-spec
    rules typed their argument as an EngineSpec; those rules now live in *_spec.py modules."""
    found = circles(sorted(PACKAGE.rglob("*.py")), typing=True)
    assert found == []


def test_the_circle_checker_sees_lazy_circles_and_ignores_typing_only_ones(tmp_path: Path) -> None:
    fake = tmp_path / "toolchain"
    (fake / "specs").mkdir(parents=True)
    (fake / "specs" / "a.py").write_text("from toolchain.specs.b import x\n")
    (fake / "specs" / "b.py").write_text("def f():\n    from toolchain.specs import a\n")  # lazy: still a circle
    (fake / "specs" / "c.py").write_text("from toolchain.specs.d import y\n")
    (fake / "specs" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toolchain.specs.c import z\n"
    )
    global PACKAGE
    saved, PACKAGE = PACKAGE, fake
    try:
        found = circles(sorted(fake.rglob("*.py")))
    finally:
        PACKAGE = saved
    assert found == [["toolchain.specs.a", "toolchain.specs.b"]]
    PACKAGE = fake
    try:
        strict = circles(sorted(fake.rglob("*.py")), typing=True)
    finally:
        PACKAGE = saved
    assert strict == [["toolchain.specs.a", "toolchain.specs.b"], ["toolchain.specs.c", "toolchain.specs.d"]]


def importers_of(top: str, files: list[Path], root: Path) -> list[str]:
    """``file:line`` of every absolute import of ``top`` or one of its submodules in ``files``."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(n == top or n.startswith(f"{top}.") for n in names):
                found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return found


def test_only_proc_and_the_watchdog_start_processes() -> None:
    """Subprocesses go through toolchain/proc.py (deadlines, logs, the watchdog); the watchdog runs on its own."""
    allowed = {PACKAGE / "proc.py", PACKAGE / "watchdog.py"}
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if p not in allowed]
    offenders = importers_of("subprocess", files, PACKAGE.parent)
    assert offenders == [], f"import subprocess outside toolchain/proc.py: {offenders}"


def test_a_module_started_with_python_m_is_an_import_of_its_layer() -> None:
    """`python -m toolchain.X` in a base module runs X on its behalf: X must be a base module too (measured before:
    proc.py, the base layer, started toolchain.triton.watchdog, a stage)."""
    for path in sorted(PACKAGE.glob("*.py")):
        started = [
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("toolchain.")
        ]
        above = [m for m in started if m.split(".")[1] not in BASE]
        assert not above, f"{path.name} starts {above}, above the base layer"


def test_tests_take_nothing_from_benchmarks() -> None:
    """Fixtures and helpers live in tests/ (conftest, tests/servers.py, tests/generated.py); benchmarks may use them,
    never the other way round (a benchmark's change must not move a test)."""
    tests = Path(__file__).resolve().parent
    offenders = importers_of("benchmarks", sorted(tests.rglob("*.py")), tests.parent)
    assert offenders == [], offenders


def test_only_the_http_module_speaks_http_itself() -> None:
    """HTTP goes through toolchain/http.py (httpx: one retry policy, one status mapping, debug logging); no module
    opens its own urllib or http.client connection."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "http.py"]
    offenders = [
        hit for top in ("urllib.request", "http.client", "requests") for hit in importers_of(top, files, PACKAGE.parent)
    ]
    assert offenders == [], f"HTTP outside toolchain/http.py: {offenders}"


def test_one_http_client_maker() -> None:
    """httpx clients are made by toolchain/http.py only (its deadlines, its logging); the load generator keeps its own
    async client for the timed requests (docs/http.md)."""
    allowed = {PACKAGE / "http.py", PACKAGE / "bench" / "loadgen.py"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            f = node.func if isinstance(node, ast.Call) else None
            named = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "httpx"
            if named and isinstance(f, ast.Attribute) and f.attr in ("Client", "AsyncClient"):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}")
    assert offenders == [], f"an httpx client made outside toolchain/http.py: {offenders}"
