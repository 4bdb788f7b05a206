"""The one way taskq shows untrusted text: one line of printable characters.

A file name, a body's field or an error message quoting one may hold
anything a spool member or a careless operator put there: newlines (a
forged log line), ESC (a terminal's control sequences), other control and
format characters (U+202E turns a line around), bytes that are not UTF-8
(lone surrogates, as os.fsdecode passes them on). `quote` is what every log
line, `.reason` file and listing shows of such text, so that it reads the
same everywhere and can be read back: printable characters stand for
themselves, a backslash is doubled, and everything else is an escape:

- \\n, \\r, \\t for newline, carriage return and tab;
- \\xNN for any other ASCII control character (ESC is \\x1b) and for a raw
  byte that is not UTF-8 (0x80 to 0xff, from surrogateescape);
- \\uNNNN or \\UNNNNNNNN for any other character that is not printable
  (C1 controls, format and separator characters, other lone surrogates).

Text that needs none of it (nearly all of it) is returned as it is, after
one check in C.
"""

from __future__ import annotations

_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str | bytes) -> str:
    """text as one line of printable characters, escaped as the module docstring says.

    Bytes are read as UTF-8, each byte that is not part of a character
    shown as \\xNN.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if text.isprintable() and "\\" not in text:
        return text
    return "".join([c if c.isprintable() and c != "\\" else _escape(c) for c in text])


def _escape(c: str) -> str:
    short = _SHORT.get(c)
    if short is not None:
        return short
    code = ord(c)
    if code < 0x80 or 0xDC80 <= code <= 0xDCFF:  # ASCII controls; raw bytes (surrogateescape)
        return f"\\x{code & 0xFF:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
