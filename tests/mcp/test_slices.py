"""The sliced decoder of large messages: the same value as ``json.loads`` within its caps,
and beyond them a prefix that says what it left out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steerloop.mcp._slices import CutDict, CutList, CutStr, decode_sliced, was_cut

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=300)
@given(values, st.booleans())
def test_within_the_caps_it_is_json_loads(value: Any, spaced: bool) -> None:
    text = json.dumps(value, indent=1 if spaced else None, ensure_ascii=spaced)
    decoded = decode_sliced(text, max_items=100, max_chars=100)
    assert decoded == json.loads(text)
    assert not was_cut(decoded)


@settings(max_examples=300)
@given(values)
def test_beyond_the_caps_it_keeps_a_prefix_and_the_original_size(value: Any) -> None:
    decoded = decode_sliced(json.dumps(value), max_items=2, max_chars=3)

    def check(original: Any, kept: Any) -> None:
        if isinstance(original, list):
            assert isinstance(kept, CutList) == (len(original) > 2)
            if isinstance(kept, CutList):
                assert kept.original == len(original)
            for a, b in zip(original, kept, strict=False):
                check(a, b)
            assert len(kept) == min(len(original), 2)
        elif isinstance(original, dict):
            assert isinstance(kept, CutDict) == (len(original) > 2)
            assert list(kept) == list(original)[:2]
            for key in kept:
                check(original[key], kept[key])
        elif isinstance(original, str):
            assert kept == original[:3]
            assert isinstance(kept, CutStr) == (len(original) > 3)
        else:
            assert kept == original

    check(json.loads(json.dumps(value)), decoded)


@pytest.mark.parametrize(
    "text",
    ["", "[", "{", '{"a" 1}', '{"a":1,}', "[1 2]", "[1]x", "nul", '"open', "[" * 100 + "]" * 100],
)
def test_malformed_or_too_deep_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid JSON at character|Unterminated string"):
        decode_sliced(text, max_items=2, max_chars=3)
