"""Parse an NDJSON batch of submissions into task bodies; pure, time injected.

One JSON object per line, with the same fields as submit's options:
command (a list of strings; required), run_at (WHEN, or epoch seconds as a
number) or in (DURATION, or seconds as a number), queue, key,
max_attempts, timeout, expires (DURATION or seconds), env (an object of
strings, merged over the defaults), payload (text for the command's
standard input) or payload_base64, cwd, mutex, priority and the resource
limits memory_max, cpu_weight, cpu_max and tasks_max (spool/resources.py;
each replaces the command line's own). Fields a line leaves out take
the values given on the command line. Every line is validated before any
task is accepted; a bad line is reported by its number. The fields are
checked by spool/fields.py, as every reader of a spool file checks them;
what a request may ask for is request.py's to say.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from taskq.client import request
from taskq.errors import BadInput
from taskq.spool import fields, resources
from taskq.spool.record import replace
from taskq.spool.resources import Resources
from taskq.spool.task import (
    MAX_ATTEMPTS,
    MAX_BODY,
    MAX_PRIORITY,
    Request,
    TaskBody,
    check_mutex,
    check_queue,
)
from taskq.times.timespec import parse_duration

# A line's JSON may spell each character of a body as a six-byte escape
# (\u0061 for "a"), so no longer line can make a task file within MAX_BODY.
MAX_LINE = 6 * MAX_BODY

FIELDS = frozenset(
    {
        "command",
        "run_at",
        "in",
        "queue",
        "key",
        "max_attempts",
        "timeout",
        "expires",
        "env",
        "payload",
        "payload_base64",
        "cwd",
        "mutex",
        "priority",
        *resources.NAMES,
    }
)


def lines(f: BinaryIO) -> Iterator[bytes]:
    """The lines of f, each of MAX_LINE bytes at most; BadInput at a longer one.

    The bound keeps a stream without newlines (a device, a runaway pipe)
    from filling memory: no longer line makes a task file within MAX_BODY.
    f is read a block at a time, and the block's lines taken by one split.
    """
    rest, number = b"", 0  # the start of a line the next block ends; the lines given
    while block := f.read(_BLOCK):
        parts = (rest + block).split(b"\n") if rest else block.split(b"\n")
        rest = parts.pop()
        # (every part but the first is within one block, far below MAX_LINE)
        if parts and len(parts[0]) > MAX_LINE:
            raise BadInput(f"batch line {number + 1}: longer than {MAX_LINE} bytes")
        number += len(parts)
        if len(rest) > MAX_LINE:
            raise BadInput(f"batch line {number + 1}: longer than {MAX_LINE} bytes")
        yield from parts
    if rest:
        yield rest


_BLOCK = 1 << 20


def parse(data: bytes | Iterable[bytes], defaults: Request, now: int) -> list[TaskBody]:
    """Turn NDJSON into bodies, each line over defaults; BadInput names the bad line."""
    bodies = []
    rows = data.split(b"\n") if isinstance(data, bytes) else data
    plain: request.Former | None = None  # the bodies of lines that give a command and a time
    for number, line in enumerate(rows, 1):
        if not line.strip():
            continue
        try:
            doc = _object(line)
            if doc.keys() <= _TIMED:  # most lines: one former makes them all
                plain = plain or request.Former(defaults, now)
                bodies.append(plain.body(doc.get("command"), _run_at(doc, now), "command"))
            else:
                bodies.append(_body(doc, defaults, now))
        except BadInput as e:
            raise BadInput(f"batch line {number}: {e}") from None
    return bodies


def _object(line: bytes) -> dict[str, Any]:
    doc = fields.document(line)
    if not doc.keys() <= _TIMED and not FIELDS.issuperset(doc):  # (a plain line's are fields)
        unknown = sorted(set(doc) - FIELDS)
        raise BadInput(f"unknown field {repr(unknown[0])[:80]}")
    if _may_repeat(line, doc):
        json.loads(line, object_pairs_hook=_once)  # BadInput at a repeated field
    return doc


def _may_repeat(line: bytes, doc: dict[str, Any]) -> bool:
    """Whether a field (or variable) may be given twice: json.loads keeps the last, silently.

    Every field name and variable name is ASCII, so unless the line has an
    escape, each one given appears in it once; counting them is several
    times cheaper than building each object in Python.
    """
    if b"\\" in line:
        return True
    for name in doc:
        if line.count(_QUOTED[name]) > 1:
            return True
    env = doc.get("env")
    if type(env) is dict:
        return any(line.count(f'"{name}"'.encode()) > 1 for name in env)
    return False


_QUOTED = {name: f'"{name}"'.encode() for name in FIELDS}
_TIMED = frozenset({"command", "run_at", "in"})


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise BadInput(f"field {key!r} given twice")
        doc[key] = value
    return doc


def _body(doc: dict[str, Any], defaults: Request, now: int) -> TaskBody:
    command = fields.strings("command", doc.get("command"))
    return request.body(defaults, command, now, _fields(doc, defaults, now))


def _fields(doc: dict[str, Any], defaults: Request, now: int) -> dict[str, Any]:
    """The fields of the request that this line gives, checked."""
    out: dict[str, Any] = {}
    run_at = _run_at(doc, now)
    if run_at is not None:
        out["run_at"] = run_at
    for name in ("timeout", "expires"):
        if name in doc:
            out[name] = _duration(name, doc[name])
    if "queue" in doc:
        out["queue"] = check_queue(fields.text("queue", doc["queue"]))
    if "key" in doc:
        out["key"] = fields.text("key", doc["key"])
    if "mutex" in doc:
        out["mutex"] = check_mutex(fields.text("mutex", doc["mutex"]))
    if "max_attempts" in doc:
        out["max_attempts"] = fields.whole("max_attempts", doc["max_attempts"], 1, MAX_ATTEMPTS)
    if "priority" in doc:
        out["priority"] = fields.whole("priority", doc["priority"], -MAX_PRIORITY, MAX_PRIORITY)
    if "env" in doc:
        env = fields.environment(doc["env"])[0]
        out["env"] = request.check_size({**defaults.env, **env})
    if "cwd" in doc:
        out["cwd"] = request.directory("cwd", fields.text("cwd", doc["cwd"]))
    if "payload" in doc or "payload_base64" in doc:
        out["stdin"] = request.payload("payload", _payload(doc))
    limits = resources.given(doc)
    if limits:  # a line's limits replace the command line's, one by one
        out["limits"] = replace(defaults.limits or Resources(), **limits)
    return out


def _run_at(doc: dict[str, Any], now: int) -> int | None:
    """The run time the line gives (run_at or in), or None if neither."""
    if "run_at" not in doc:
        return None if "in" not in doc else now + _duration("in", doc["in"], allow_zero=True)
    at = _instant(doc["run_at"])
    delay = _duration("in", doc["in"], allow_zero=True) if "in" in doc else None
    return request.run_at(at, delay, now, names=("run_at", "in"))


def _instant(value: Any) -> str:
    """run_at as a WHEN: a string, or epoch seconds as a number."""
    if type(value) is int or type(value) is float:
        if not math.isfinite(value):
            raise BadInput("run_at must be a finite number of seconds")
        return f"@{value:.6f}"
    return fields.text("run_at", value)


def _duration(name: str, value: Any, allow_zero: bool = False) -> int:
    """A DURATION as text, or a number of seconds."""
    if type(value) is str:
        us = parse_duration(value)
        return us if allow_zero else request.positive(name, us)
    if type(value) is not int and type(value) is not float:
        raise BadInput(f"{name} must be a string (a DURATION) or a number of seconds")
    return fields.seconds(name, value, allow_zero)


def _payload(doc: dict[str, Any]) -> bytes:
    if "payload" in doc and "payload_base64" in doc:
        raise BadInput("give payload or payload_base64, not both")
    if "payload" in doc:
        return fields.text("payload", doc["payload"]).encode()
    import base64  # only for a line with payload_base64
    import binascii

    try:
        return base64.b64decode(fields.text("payload_base64", doc["payload_base64"]), validate=True)
    except binascii.Error:
        raise BadInput("payload_base64 is not base64") from None
