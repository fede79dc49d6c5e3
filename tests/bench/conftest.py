"""Every bench result the bench tests write is held to the published JSON Schema (docs/bench-result.schema.json),
checked with the ``jsonschema`` library, not with the model that wrote it.

In-process writers are caught by wrapping ``build_document`` where the writers call it (toolchain.bench.run, which
``save`` also goes through, and toolchain.pipeline.bench); files written by a ``toolchain bench`` subprocess are
checked by the tests that read them, with the ``valid_result`` fixture.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "bench-result.schema.json"


@pytest.fixture(scope="session")
def result_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_problems(validator: Any, doc: Any) -> list[str]:
    """Every way ``doc`` breaks the published schema, each as ``path: message``."""
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(document)'}: {e.message[:300]}"
        for e in validator.iter_errors(doc)
    ]


@pytest.fixture
def valid_result(result_validator: Any) -> Callable[[Any], None]:
    """Assert that a result document (as read back from a file) validates against the published schema."""

    def check(doc: Any) -> None:
        problems = schema_problems(result_validator, doc)
        assert not problems, "the bench result does not match docs/bench-result.schema.json:\n" + "\n".join(problems)

    return check


@pytest.fixture(autouse=True)
def _written_results_match_the_published_schema(
    monkeypatch: pytest.MonkeyPatch, result_validator: Any
) -> Iterator[None]:
    import toolchain.bench.run as bench_run
    from toolchain.bench.result import BenchResult
    from toolchain.bench.result import build_result as real

    problems: list[str] = []

    def checked(doc: dict[str, Any]) -> BenchResult:
        out = real(doc)
        problems.extend(schema_problems(result_validator, json.loads(json.dumps(out.document()))))
        return out

    monkeypatch.setattr(bench_run, "build_result", checked)
    yield
    assert not problems, "a bench result this test wrote does not match docs/bench-result.schema.json:\n" + "\n".join(
        problems
    )
