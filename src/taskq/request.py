"""A submission request, from submit's options or a batch line, and its task body.

The one place that says what a request may ask for: a run time (at a time
or after a delay, not both), durations longer than zero, variable names,
an absolute working directory that exists, a payload within the limit, and
the task body that results, with a fresh id. Pure but for the directory
check; time is injected.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from taskq.errors import BadInput
from taskq.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PATH,
    DEFAULT_QUEUE,
    MAX_STDIN,
    TaskBody,
    new_id,
)
from taskq.timespec import parse_when

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ATTEMPTS = 1000  # the largest --max-attempts a request may ask for


@dataclass(frozen=True)
class Request:
    """Everything a submission asks for but its command; TaskBody's fields by name.

    A batch line starts from the command line's request and replaces what
    it gives (dataclasses.replace).
    """

    run_at: int
    cwd: str
    env: dict[str, str] = field(default_factory=lambda: environment(()))
    queue: str = DEFAULT_QUEUE
    key: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: int | None = None  # microseconds
    expires: int | None = None  # microseconds after run_at
    stdin: bytes | None = None
    after: list[str] = field(default_factory=list)
    after_any: bool = False
    mail: str | None = None

    def body(self, argv: Sequence[str], now: int) -> TaskBody:
        """The task body asking to run argv so, submitted now, with a fresh id."""
        fields = dataclasses.asdict(self)
        return TaskBody(id=new_id(now), argv=list(argv), submitted_at=now, **fields)


def run_at(
    at: str | None, delay: int | None, now: int, names: tuple[str, str] = ("--at", "--in")
) -> int:
    """The run time: at (a WHEN), or now + delay, or now; names say how both were given."""
    if at is not None and delay is not None:
        raise BadInput(f"give {names[0]} or {names[1]}, not both")
    if at is not None:
        return parse_when(at, now)
    return now + (delay or 0)


def positive(what: str, us: int) -> int:
    """A duration that must be longer than zero (--timeout, --expires, --lease...)."""
    if us <= 0:
        raise BadInput(f"{what} must be longer than zero")
    return us


def environment(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A task's variables: the default PATH, then the given NAME=VALUE pairs over it."""
    return {"PATH": DEFAULT_PATH, **dict(pairs)}


def env_name(name: str) -> bool:
    """Tell whether a variable name is one a task may set: [A-Za-z_][A-Za-z0-9_]*."""
    return ENV_NAME.fullmatch(name) is not None


def directory(what: str, path: str) -> str:
    """A working directory: an absolute path to a directory that exists now."""
    if not os.path.isabs(path):
        raise BadInput(f"{what} {path!r} is not an absolute path")
    if not os.path.isdir(path):
        raise BadInput(f"{what} {path!r} is not a directory")
    return path


def payload(what: str, data: bytes) -> bytes:
    """Data for the command's standard input, within MAX_STDIN bytes."""
    if len(data) > MAX_STDIN:
        raise BadInput(f"{what} is over the limit of {MAX_STDIN} bytes")
    return data
