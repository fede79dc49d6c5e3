"""The mocker's timing tables: written without numpy, read back by numpy (the format the mocker's loader reads
with np.load), holding the planner's formulas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.dynamo.conftest import DISAGG
from toolchain.dynamo.local import default_speedup, timing_of
from toolchain.dynamo.pipeline import plan_spec
from toolchain.dynamo.timing import npy_bytes, write_profile


def test_npy_round_trips_through_numpy(tmp_path: Path) -> None:
    values = [0.5 * i - 3 for i in range(12)]
    (tmp_path / "a.npy").write_bytes(npy_bytes(values, (3, 4)))
    got = np.load(tmp_path / "a.npy")
    assert got.shape == (3, 4) and got.dtype == np.float64
    assert got.ravel().tolist() == values
    with pytest.raises(ValueError):
        npy_bytes(values, (5, 5))


def test_profile_holds_the_planners_estimates(tmp_path: Path) -> None:
    planned = plan_spec(DISAGG)
    plan, cell = planned.plan, planned.cell
    dec = plan.pool("decode")
    t = timing_of(dec, plan, cell)
    path = write_profile(tmp_path / "p.npz", t)
    with np.load(path) as z:
        assert set(z.files) == {
            "prefill_isl",
            "prefill_ttft_ms",
            "decode_active_kv_tokens",
            "decode_context_length",
            "decode_itl",
        }
        isl, ttft = z["prefill_isl"], z["prefill_ttft_ms"]
        # prefill is linear in prompt tokens at the plan's rate: prefill(mean prompt) at the mean prompt
        assert np.interp(plan.avg_input, isl, ttft) == pytest.approx(dec.prefill_ms, rel=1e-6)
        kv, itl = z["decode_active_kv_tokens"], z["decode_itl"]
        assert itl.shape == (len(kv), len(z["decode_context_length"]))
        # an empty batch reads only the weights: weights per rank ÷ HBM
        assert itl[0, 0] == pytest.approx(dec.weight_read_bytes / cell.gpu.hbm_bytes_s * 1000)
        assert (np.diff(itl[:, 0]) > 0).all()  # more KV read, longer step
    assert default_speedup(plan) == pytest.approx(round(dec.step_ms / 4.0, 2))
