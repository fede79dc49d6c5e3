"""One type per concept: no Protocol in the package repeats the fields of a dataclass defined in it.

A stage that may not import a sibling stage used to read the sibling's record through a Protocol copy of its
fields (``deploy.sizing.PlanLike`` for ``planning.plan.CellPlan``; ``deploy.observability.RuleLike`` for the
diagnosis rule table's ``Rule``): two definitions to keep in step, and a field renamed in one broke the other only
at run time. Such a record belongs below the stages (``toolchain.artifacts``), where every stage reads the one type.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "toolchain"


def _is_dataclass(node: ast.ClassDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(
        (isinstance(b, ast.Name) and b.id == "Protocol") or ast.unparse(b).endswith(".Protocol") for b in node.bases
    )


def _attributes(node: ast.ClassDef) -> set[str]:
    """Annotated fields and read-only properties: the data a class describes (not its methods)."""
    names = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.FunctionDef) and any(ast.unparse(d) == "property" for d in item.decorator_list):
            names.add(item.name)
    return names


def protocol_copies(root: Path) -> list[str]:
    records: dict[str, set[str]] = {}
    protocols: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent).with_suffix("").as_posix().replace("/", ".")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                if _is_dataclass(node):
                    records[f"{where}.{node.name}"] = _attributes(node)
                elif _is_protocol(node):
                    protocols[f"{where}.{node.name}"] = _attributes(node)
    return [
        f"{proto} repeats {len(fields)} fields of {record}"
        for proto, fields in protocols.items()
        if len(fields) >= 2
        for record, has in records.items()
        if fields <= has
    ]


def test_no_protocol_copies_a_record() -> None:
    assert protocol_copies(PACKAGE) == []


def test_the_check_sees_a_copy(tmp_path: Path) -> None:
    pkg = tmp_path / "toolchain"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Plan:\n    x: int\n    y: int\n    z: int\n"
    )
    protocol = "class PlanLike(Protocol):\n    x: int\n    @property\n    def y(self) -> int: ...\n"
    (pkg / "b.py").write_text("from typing import Protocol\n" + protocol)
    assert protocol_copies(pkg) == ["toolchain.b.PlanLike repeats 2 fields of toolchain.a.Plan"]
