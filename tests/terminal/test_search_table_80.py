"""The SLO search's probe table at 80 columns: every value whole (the load used to print as `concurr…` on
every row), the reasons for a miss in full below the table."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from toolchain.bench.result import Probe, Search


def _probes() -> list[Probe]:
    out = []
    for load, phase in ((1, "grow"), (2, "grow"), (4, "grow"), (8, "grow"), (16, "grow"), (12, "bisect")):
        missed = load > 8
        out.append(
            Probe(
                load=load,
                label=f"concurrency={load}",
                passed=not missed,
                phase=phase,
                ttft_ms_p99=123.4 * load,
                tpot_ms_p99=12.3,
                goodput_fraction=0.8 if missed else 1.0,
                output_token_throughput_tps=1234.5 * load,
                reasons=[f"TTFT p99 {123.4 * load:.0f} ms > 1000 ms", "goodput 80% < 90%"] if missed else [],
            )
        )
    return out


def test_the_probe_table_fits_80_columns_with_every_value_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.cli import render
    from toolchain.cli.bench_cmd import print_search

    table, notes = io.StringIO(), io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=table, width=80, force_terminal=True, color_system=None))
    monkeypatch.setattr(render, "err", Console(file=notes, width=80, force_terminal=True, color_system=None))
    probes = _probes()
    print_search(Search(mode="concurrency", slo_text="TTFT p99 <= 1000 ms", probes=probes, curve=probes, message="ok"))
    lines = table.getvalue().splitlines()
    assert max(len(x) for x in lines) <= 80 and "…" not in table.getvalue()
    rows = [x for x in lines if x.startswith("│")]
    assert len(rows) == len(probes)  # one line per probe: nothing wrapped
    for p, row in zip(probes, rows, strict=True):
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1] == f"{p.load:g}" and cells[2] == p.phase and cells[-1] == ("met" if p.passed else "missed")
    assert "probe 5 (concurrency=16) missed: TTFT p99 1974 ms > 1000 ms; goodput 80% < 90%" in notes.getvalue()
