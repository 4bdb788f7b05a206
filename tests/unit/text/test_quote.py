"""quote: untrusted text as one line of printable characters, the same everywhere."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from taskq.text.quote import quote


def test_plain_text_is_unchanged() -> None:
    for text in ("", "hello", "pending/20260101/x_y", "é ü ß 漢字", "a b"):
        assert quote(text) == text


def test_controls_and_backslashes_are_escaped() -> None:
    assert quote("a\nb") == "a\\nb"
    assert quote("a\r\tb") == "a\\r\\tb"
    assert quote("\x1b[31mred") == "\\x1b[31mred"
    assert quote("\x00\x7f") == "\\x00\\x7f"
    assert quote("a\\nb") == "a\\\\nb"  # a literal backslash cannot pass for an escape


def test_non_printable_characters_are_escaped() -> None:
    assert quote("\u202eevil") == "\\u202eevil"  # right-to-left override
    assert quote("\x85") == "\\u0085"  # a C1 control is not a raw byte
    assert quote("\u2028") == "\\u2028"
    assert quote("\U000e0001") == "\\U000e0001"
    assert quote("\ud800") == "\\ud800"


def test_bytes_that_are_not_utf8_show_as_bytes() -> None:
    assert quote(b"caf\xc3\xa9 \xff\xfe") == "café \\xff\\xfe"
    assert quote(os.fsdecode(b"name\xff")) == "name\\xff"


def test_a_forged_log_line_stays_on_its_line() -> None:
    name = "x\ntaskq[1]: started 01ARZ3NDEKTSV4RRFFQ69G5FAV attempt 1"
    assert "\n" not in quote(name)
    assert quote(name).startswith("x\\ntaskq[1]")


@given(st.text())
def test_every_text_becomes_one_printable_line(text: str) -> None:
    out = quote(text)
    assert out.isprintable()
    out.encode()  # valid UTF-8: no lone surrogate is left (else UnicodeEncodeError)


@given(st.text(), st.text())
def test_quoting_is_injective(a: str, b: str) -> None:
    if a != b:
        assert quote(a) != quote(b)
