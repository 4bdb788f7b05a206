"""The one set of field checks: every reader of a spool file and the request builder use it.

A value comes from JSON or TOML that anyone may have written: a task body,
a batch line, schedule.json, a pause, a daemon's record, config.toml. Each
check takes the value as decoded and the name of the field, and returns it
in the form later code needs, or raises BadInput naming the field and what
is wrong with it. Readers of files turn that into CorruptFile (the file is
bad); the request builder lets it through (the input is bad). The limits
are those of what later code does with the value:

- a string that reaches exec(), a path or the environment holds no NUL and
  is UTF-8 (no lone surrogate), and is one exec() string at most
  (MAX_EXEC_STRING bytes); a variable's name is [A-Za-z_][A-Za-z0-9_]*;
- a number of seconds is finite and within a century (MAX_DURATION), so
  that microseconds, sums of instants and durations, and datetime all take
  it; an instant is within 1970 to 9999 (MAX_INSTANT);
- a JSON document is an object, nested no deeper than the C decoder can
  go without a RecursionError, with no NaN or Infinity.

The checks of lists run in C where they can (joins, one encode, one
pattern match): a body is read at every attempt, on the daemon's path.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

from taskq.errors import BadInput
from taskq.text.lazyre import Lazy
from taskq.times.timespec import MAX_DURATION, SECOND, parse_iso_utc

# What exec() takes: the command's arguments and variables together (with a
# NUL each), well inside Linux's ARG_MAX of a quarter of an 8 MiB stack,
# leaving room for the variables the daemon adds; and each one string, as
# Linux's MAX_ARG_STRLEN (32 pages) requires.
MAX_EXEC = 1 << 20
MAX_EXEC_STRING = (32 << 12) - 1
MAX_SECONDS = MAX_DURATION // SECOND


def env_name(name: str) -> bool:
    """Tell whether a variable name is one a task may set: [A-Za-z_][A-Za-z0-9_]*.

    For ASCII text that is exactly str.isidentifier's rule (which takes
    keywords too), checked in C with no pattern to compile at start-up.
    """
    return name.isascii() and name.isidentifier()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


@functools.cache
def _decoder() -> tuple[Any, Any, type[ValueError]]:
    """JSONDecoder.decode's own steps: its C scanner, the match of white space, its error.

    Without decode's two Python calls: a batch decodes one document a line.
    Made on first use, so json stays off a plain submit's start-up.
    """
    import json  # on first use: off a plain submit's start-up

    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    space = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]
    return decoder.scan_once, space, json.JSONDecodeError  # type: ignore[attr-defined]


def document(data: bytes | str) -> dict[str, Any]:
    """A JSON object, decoded; BadInput says why data is not one.

    Nesting deeper than the decoder can follow (a few thousand arrays) is
    refused here, as a RecursionError, before any later code walks it.
    """
    scan, space, error = _decoder()
    try:
        text = data.decode() if isinstance(data, bytes) else data
        try:  # (white space is matched only where there is some: a batch's lines have none)
            doc, end = scan(text, 0 if text[:1] == "{" else space(text, 0).end())
        except StopIteration as e:
            raise error("Expecting value", text, e.value) from None
        if end != len(text) and space(text, end).end() != len(text):
            raise error("Extra data", text, space(text, end).end())
    except RecursionError:
        raise BadInput("JSON nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError among them
        raise BadInput(f"not JSON: {e}") from None
    if type(doc) is not dict:
        raise BadInput("not a JSON object")
    return doc


def text(what: str, value: object) -> str:
    """A string that may reach exec(), a path or a file name: UTF-8, no NUL."""
    if type(value) is not str:
        raise BadInput(f"{what} must be a string")
    utf8_text(what, value)
    return value


def utf8_text(what: str, value: str, prefix: str = "") -> int:
    """The size in bytes of a string that must be UTF-8 with no NUL; prefix + what names it."""
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise BadInput(f"{prefix}{what} is not valid UTF-8 text") from None
    if "\0" in value:
        raise BadInput(f"{prefix}{what} contains a NUL byte")
    return size


def exec_string(what: str, value: str, prefix: str = "") -> int:
    """The size in bytes of one exec() string, checked: UTF-8, no NUL, within MAX_EXEC_STRING."""
    size = utf8_text(what, value, prefix)
    if size > MAX_EXEC_STRING:
        raise BadInput(f"{prefix}{what} is {size} bytes; exec() takes at most {MAX_EXEC_STRING}")
    return size


def strings(what: str, value: object) -> list[str]:
    """A non-empty JSON list of strings (the types only)."""
    if type(value) is not list or not value or not set(map(type, value)) <= _STR:
        raise BadInput(f"{what} must be a non-empty list of strings")
    return value


_STR = {str}


def command(value: object, what: str = "argv") -> tuple[list[str], int]:
    """A command's argv and what it takes of exec() (a NUL after each)."""
    argv = strings(what, value)
    size = _exec_list(argv)
    if size < 0:  # the slow path, only to name the first bad argument
        size = sum(
            exec_string(f"argument {i} of the command", a) + 1 for i, a in enumerate(argv, 1)
        )
    return argv, size


def _exec_list(items: list[str]) -> int:
    """The exec() bytes of strings, each with its NUL, checked in C; -1 if any is bad."""
    joined = "".join(items)
    try:
        size = len(joined.encode())
    except UnicodeEncodeError:
        return -1
    if "\0" in joined:
        return -1
    # A character is at most 4 bytes: only strings that could be too long are measured.
    if (
        len(joined) * 4 > MAX_EXEC_STRING
        and max(map(len, items)) * 4 > MAX_EXEC_STRING
        and max(len(s.encode()) for s in items) > MAX_EXEC_STRING
    ):
        return -1
    return size + len(items)


def environment(value: object, what: str = "env") -> tuple[dict[str, str], int]:
    """Variables, names [A-Za-z_][A-Za-z0-9_]* to strings; the exec() bytes NAME=VALUE\\0 take."""
    if type(value) is not dict:
        raise BadInput(f"{what} must map variable names to strings")
    env: dict[str, str] = value
    if not env:
        return env, 0
    names = "=".join(env)
    values = list(env.values())
    ok = set(map(type, values)) <= _STR and _names_ok(names, len(env))
    size = _exec_list(values) if ok else -1
    if size < 0:
        return env, _env_slowly(env, what)
    return env, size + len(names) + 1  # each name, its '=' (len(names) has all but one)


@functools.lru_cache(maxsize=256)  # the bodies of a batch, or of one submitter, share theirs
def _names_ok(names: str, count: int) -> bool:
    """Whether names joined by '=' are count valid variable names (none held a '=')."""
    if names.count("=") != count - 1 or not names.isascii():
        return False
    return all(map(str.isidentifier, names.split("=")))


def _env_slowly(env: Mapping[Any, Any], what: str) -> int:
    """environment()'s checks one variable at a time, to name the first that fails."""
    size = 0
    for name, value in env.items():
        if type(name) is not str or not env_name(name):
            raise BadInput(f"bad {what} entry {name!r}: names are [A-Za-z_][A-Za-z0-9_]*")
        if type(value) is not str:
            raise BadInput(f"{what} must map variable names to strings ({name} does not)")
        size += exec_string(name, f"{name}={value}", "variable ") + 1
    return size


def absolute_path(what: str, value: object) -> str:
    """An absolute path as text (no NUL, UTF-8)."""
    path = text(what, value)
    if not path.startswith("/"):
        raise BadInput(f"{what} {path!r} is not an absolute path")
    return path


def whole(what: str, value: object, lo: int, hi: int) -> int:
    """A whole number from lo to hi (JSON's true and false are not numbers)."""
    if type(value) is not int or not lo <= value <= hi:
        raise BadInput(f"{what} must be a whole number from {lo} to {hi}")
    return value


MAX_UID = (1 << 32) - 2  # (uid_t)-1 means "no change" to chown(2)


def uid(what: str, value: object) -> int:
    """A user id, as a file's owner can be."""
    if type(value) is not int or not 0 <= value <= MAX_UID:
        raise BadInput(f"{what} must be a uid (0 to {MAX_UID})")
    return value


def seconds(what: str, value: object, allow_zero: bool = False) -> int:
    """A number of seconds, finite, above zero (or zero) and within a century; in µs."""
    kind = type(value)
    if kind is not int and kind is not float:
        raise BadInput(f"{what} must be a number of seconds")
    secs: float = value  # type: ignore[assignment]
    low_ok = secs >= 0 if allow_zero else secs > 0
    if not (low_ok and secs <= MAX_SECONDS):  # NaN fails both comparisons
        low = "0" if allow_zero else "above 0"
        raise BadInput(f"{what} must be from {low} to {MAX_SECONDS} seconds (a century)")
    us = round(secs * SECOND)
    if us == 0 and not allow_zero:  # a positive number under half a µs
        raise BadInput(f"{what} must be at least 0.000001 seconds (a microsecond)")
    return us


def epoch_seconds(what: str, value: object) -> int:
    """A finite number of seconds since the epoch, as an instant in range; in µs."""
    kind = type(value)
    if (kind is not int and kind is not float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise BadInput(f"{what} must be a finite number of seconds")
    return instant(what, f"@{value:f}" if kind is float else f"@{value}")


def instant(what: str, value: object) -> int:
    """A time: as taskq writes it, or as a person may (parse_when, read as UTC), 1970 to 9999."""
    if type(value) is not str:
        raise BadInput(f"{what} must be a time as text")
    try:
        return _instant(value)
    except BadInput as e:
        raise BadInput(f"{what}: {e}") from None


@functools.lru_cache(maxsize=1024)  # a burst's bodies share a run_at, a batch's its submitted_at
def _instant(value: str) -> int:
    us = parse_iso_utc(value)
    if us is not None and us >= 0:
        return us  # (parse_iso_utc stops at 9999 by itself)
    from taskq.times.when import parse_when  # hand-written only: off submit's start-up path

    return parse_when(value, 0, UTC)


_SIZE = Lazy(r"(\d+)\s*([KMGT]i?B?|B)?", re.IGNORECASE)
_SCALE = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size(what: str, value: object, lo: int = 0, hi: int = 1 << 63) -> int:
    """A byte count from lo to hi: a whole number, or text such as "512M" or "10GiB" (1024s)."""
    if type(value) is int:
        amount = value
    else:
        m = _SIZE.fullmatch(value.strip()) if type(value) is str else None
        if m is None:
            raise BadInput(f'{what} must be bytes, e.g. 1048576 or "1M"')
        amount = int(m.group(1)) * _SCALE[(m.group(2) or "")[:1].upper()]
    if not lo <= amount <= hi:
        raise BadInput(f"{what} must be from {lo} to {hi} bytes")
    return amount


def choice(what: str, value: object, allowed: tuple[str, ...]) -> str:
    """One of the allowed words."""
    if value not in allowed or type(value) is not str:
        raise BadInput(f"{what} must be one of {', '.join(allowed)}")
    return value


def flag(what: str, value: object) -> bool:
    """true or false."""
    if type(value) is not bool:
        raise BadInput(f"{what} must be true or false")
    return value


Check = Callable[[object], bool]


def conforms(doc: dict[str, Any], checks: Mapping[str, Check]) -> bool:
    """Whether each known field of a record passes its check, and the rest are scalars.

    For records that are shown as they are (journal lines, daemons' status
    records): an unknown field may be shown but never walked, so it may
    not nest.
    """
    try:
        for key, value in doc.items():
            check = checks.get(key)
            if check is None:
                if value is not None and type(value) not in _SCALARS:
                    return False
            elif not check(value):
                return False
    except (BadInput, TypeError, ValueError, OverflowError):
        return False
    return True


_SCALARS = {str, int, float, bool}


def or_none(check: Check) -> Check:
    """A check that also passes null (a field a writer may record as having no value)."""
    return lambda value: value is None or check(value)


def is_text(value: object) -> bool:
    return type(value) is str


def is_flag(value: object) -> bool:
    return type(value) is bool


def is_time(value: object) -> bool:
    """A time taskq takes (instant); BadInput is as good as False to conforms()."""
    instant("time", value)
    return True


def is_number(value: object) -> bool:
    """A finite number within a century of seconds, either way."""
    return type(value) in (int, float) and abs(value) <= MAX_SECONDS  # type: ignore[arg-type]


def is_whole(lo: int, hi: int) -> Check:
    return lambda v: type(v) is int and lo <= v <= hi


def optional(check: Callable[..., Any], what: str, value: object, *args: Any) -> Any:
    """check(what, value, *args), or None for a value that is absent (None)."""
    return None if value is None else check(what, value, *args)
