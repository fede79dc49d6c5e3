"""Property tests: whatever bytes or structures arrive, the parser answers with a SpecError or a spec."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from toolchain.errors import SpecError
from toolchain.specs.loader import parse_spec_text

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
KEYS = [
    "name",
    "model",
    "quantization",
    "target",
    "matrix",
    "build",
    "serving",
    "slo",
    "traffic",
    "runtime",
    "source",
    "weights",
    "gpu",
    "max_batch_size",
    "max_seq_len",
    "tp",
    "trtllm_version",
]
specs = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), values, max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(specs)
def test_structured_garbage(d: dict[str, Any]) -> None:
    text = yaml.safe_dump(d)
    try:
        parse_spec_text(text, "fuzz.yaml")
    except SpecError as e:
        assert "\n" not in e.message
        assert e.message.startswith("fuzz.yaml")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_text_garbage(text: str) -> None:
    try:
        parse_spec_text(text, "fuzz.yaml")
    except SpecError as e:
        assert e.message.startswith("fuzz.yaml")
