"""`spec expand` prints thousands of cells as a table with the data of their JSON (the speed beside the JSON's:
benchmarks/matrix_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.generated import make_spec


@pytest.mark.slow
def test_wide_table_has_the_json_rows(cli: Cli, tmp_path: Path) -> None:
    spec = make_spec(tmp_path / "spec.yaml", 2000)
    as_json = cli("spec", "expand", spec, "--json")
    table = cli("spec", "expand", spec, "--wide")
    assert as_json.exit_code == 0 and table.exit_code == 0, table.output
    cells = json.loads(as_json.stdout)["cells"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(cells) == 2000
    for row, c in zip(rows, cells, strict=True):
        assert row[0] == c["id"] and row[6] == c["engine_key"][:16] and row[7] == c["profile_id"][:16]
        assert row[1:6] == [c["gpu"], str(c["max_batch_size"]), str(c["max_seq_len"]), str(c["max_input_len"]), "1"]
    narrow = cli("spec", "expand", spec)  # the default: the id names the shape; keys beside it
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in narrow.stdout.splitlines() if line.startswith("│")]
    assert [[c["id"], c["engine_key"][:16], c["profile_id"][:16]] for c in cells] == rows
