"""Key redaction in adapter messages and telemetry (issue 11, item 21)."""

from __future__ import annotations

from steerloop.llm._http import NO_KEY, redact


def test_a_one_letter_key_does_not_mangle_words() -> None:
    """A configured key too short to be a real secret is not replaced inside words."""
    assert redact("chunked read failed", "k") == "chunked read failed"


def test_a_real_key_is_replaced_wherever_it_appears() -> None:
    key = "abcd1234efgh5678"
    assert redact(f"auth {key} refused ({key})", key) == "auth *** refused (***)"


def test_key_shaped_tokens_are_replaced_but_words_that_contain_sk_are_not() -> None:
    text = "disk-usage-report ok; key sk-proj-ABCDEF123456 and Bearer tok.en-1 and ask-me-later"
    assert redact(text, None) == "disk-usage-report ok; key *** and Bearer *** and ask-me-later"


def test_the_placeholder_key_is_left_alone() -> None:
    assert redact(f"sent {NO_KEY}", NO_KEY) == f"sent {NO_KEY}"
