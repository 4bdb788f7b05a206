"""Parse an NDJSON batch of submissions into task bodies; pure, time injected.

One JSON object per line, with the same fields as submit's options:
command (a list of strings; required), run_at (WHEN, or epoch seconds as a
number) or in (DURATION, or seconds as a number), queue, key,
max_attempts, timeout, expires (DURATION or seconds), env (an object of
strings, merged over the defaults), payload (text for the command's
standard input) or payload_base64, and cwd. Fields a line leaves out take
the values given on the command line. Every line is validated before any
task is accepted; a bad line is reported by its number.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import re
from typing import Any

from taskq.errors import BadInput
from taskq.task import MAX_STDIN, TaskBody, check_queue, new_id
from taskq.timespec import SECOND, parse_duration, parse_when

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
    }
)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(data: bytes, template: TaskBody, now: int) -> list[TaskBody]:
    """Turn NDJSON into bodies based on template; BadInput names the bad line."""
    bodies = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            bodies.append(_body(_object(line), template, now))
        except BadInput as e:
            raise BadInput(f"batch line {number}: {e}") from None
    return bodies


def _object(line: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise BadInput(f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadInput("not a JSON object")
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        raise BadInput(f"unknown field {unknown[0]!r}")
    return doc


def _body(doc: dict[str, Any], template: TaskBody, now: int) -> TaskBody:
    command = doc.get("command")
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        raise BadInput("command must be a non-empty list of strings")
    if "run_at" in doc and "in" in doc:
        raise BadInput("give run_at or in, not both")
    fields: dict[str, Any] = {"id": new_id(now), "argv": command, "submitted_at": now}
    if "run_at" in doc:
        fields["run_at"] = _instant(doc["run_at"], now)
    elif "in" in doc:
        fields["run_at"] = now + _duration("in", doc["in"], allow_zero=True)
    for name in ("timeout", "expires"):
        if name in doc:
            fields[name] = _duration(name, doc[name])
    if "queue" in doc:
        fields["queue"] = check_queue(_string("queue", doc["queue"]))
    if "key" in doc:
        fields["key"] = _string("key", doc["key"])
    if "max_attempts" in doc:
        fields["max_attempts"] = _attempts(doc["max_attempts"])
    if "env" in doc:
        fields["env"] = {**template.env, **_env(doc["env"])}
    if "cwd" in doc:
        fields["cwd"] = _cwd(doc["cwd"])
    if "payload" in doc or "payload_base64" in doc:
        fields["stdin"] = _payload(doc)
    return dataclasses.replace(template, **fields)


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    return value


def _instant(value: Any, now: int) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return parse_when(f"@{value:.6f}", now)
    return parse_when(_string("run_at", value), now)


def _duration(name: str, value: Any, allow_zero: bool = False) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        us = round(value * SECOND)
    else:
        us = parse_duration(_string(name, value))
    if us <= 0 and not allow_zero:
        raise BadInput(f"{name} must be longer than zero")
    return us


def _attempts(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1000:
        raise BadInput("max_attempts must be a whole number from 1 to 1000")
    return value


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise BadInput("env must be an object of strings")
    for k, v in value.items():
        if not ENV_NAME.fullmatch(k) or not isinstance(v, str):
            raise BadInput(f"bad env entry {k!r}: names are [A-Za-z_][A-Za-z0-9_]*, values strings")
    return dict(value)


def _cwd(value: Any) -> str:
    path = _string("cwd", value)
    if not os.path.isabs(path) or not os.path.isdir(path):
        raise BadInput(f"cwd {path!r} is not an absolute path to a directory")
    return path


def _payload(doc: dict[str, Any]) -> bytes:
    if "payload" in doc and "payload_base64" in doc:
        raise BadInput("give payload or payload_base64, not both")
    if "payload" in doc:
        data = _string("payload", doc["payload"]).encode()
    else:
        try:
            data = base64.b64decode(_string("payload_base64", doc["payload_base64"]), validate=True)
        except binascii.Error:
            raise BadInput("payload_base64 is not base64") from None
    if len(data) > MAX_STDIN:
        raise BadInput(f"payload is over the limit of {MAX_STDIN} bytes")
    return data
