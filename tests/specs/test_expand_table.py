"""`spec expand` prints thousands of cells as a table about as fast as their JSON, with the same data."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import Cli
from tests.generated import make_spec


def test_table_has_the_json_rows_and_costs_about_the_same(cli: Cli, tmp_path: Path) -> None:
    spec = make_spec(tmp_path / "spec.yaml", 2000)
    cli("spec", "expand", spec, "--json")  # warm: imports, spec parsing caches
    t = time.perf_counter()
    as_json = cli("spec", "expand", spec, "--json")
    t_json = time.perf_counter() - t
    t = time.perf_counter()
    table = cli("spec", "expand", spec)
    t_table = time.perf_counter() - t
    assert as_json.exit_code == 0 and table.exit_code == 0, table.output
    cells = json.loads(as_json.stdout)["cells"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(cells) == 2000
    for row, c in zip(rows, cells, strict=True):
        assert row[0] == c["id"] and row[6] == c["engine_key"][:16] and row[7] == c["profile_id"][:16]
        assert row[1:6] == [c["gpu"], str(c["max_batch_size"]), str(c["max_seq_len"]), str(c["max_input_len"]), "1"]
    assert t_table < 3 * t_json, f"table {t_table:.2f} s vs json {t_json:.2f} s"
