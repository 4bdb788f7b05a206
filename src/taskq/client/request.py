"""A submission's task body, from submit's options or a batch line: made and checked.

The one place that says what a request may ask for: a run time (at a time
or after a delay, not both), durations longer than zero, variable names,
an absolute working directory that exists, a payload within the limit, and
the task body that results, with a fresh id. Pure but for the directory
check; time is injected.

A body is checked whole before it is accepted (`accepted`): its text is
UTF-8, exec() could take its command and variables, and its file fits the
limit the daemon reads. A task the daemon would quarantine or could not
start is refused here, with one line saying why, so no accepted task can
be lost that way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from taskq.errors import BadInput
from taskq.spool import fields
from taskq.spool.fields import MAX_EXEC
from taskq.spool.memo import LastOf
from taskq.spool.task import (
    DEFAULT_PATH,
    MAX_ATTEMPTS,
    MAX_BODY,
    MAX_STDIN,
    REQUESTED,
    Bodies,
    Request,
    TaskBody,
    new_id,
)

__all__ = ["MAX_ATTEMPTS"]  # (the largest --max-attempts; the body reader's limit)
MAX_ENV = 256 << 10  # bytes of NAME=VALUE\0 a task's environment may take in its body


def body(
    request: Request, argv: Sequence[str], now: int, changes: Mapping[str, Any] | None = None
) -> TaskBody:
    """The task body asking to run argv as `request` says, submitted now, with a fresh id.

    `changes` replaces some of the request's fields for this body alone (a
    batch line's), as record.replace would, without making a request.
    Any Request will do, a body too (a schedule's template): only the
    fields a request gives are read (task.REQUESTED).
    """
    return Former(request, now, changes).body(list(argv))


class Former:
    """The bodies of one request submitted at one instant, each with a fresh id: made and checked.

    What a body takes from its request is checked once, when the former
    is made (its text, MAILTO, the variables' room in exec()); what is a
    body's own, its command and its file's size, as each is made. So a
    batch's lines that give only a command and a time make their bodies
    through one former, checked as `accepted` checks a body.
    """

    __slots__ = ("_bodies", "_env_bytes", "_now", "_run_at")

    def __init__(self, request: Request, now: int, changes: Mapping[str, Any] | None = None):
        # Shallow, and the env shared, not copied: a body is never modified,
        # and a batch's bodies that share one env have it checked and encoded
        # once (memo.LastOf; python bench/run.py --only submit, --batch rows).
        values = {**_requested(request), **changes} if changes else dict(_requested(request))
        values["submitted_at"] = now
        self._env_bytes = _shared_checks(values)
        self._bodies = Bodies(values)
        self._now = now
        self._run_at: int = values["run_at"]

    def body(self, argv: object, run_at: int | None = None, what: str = "argv") -> TaskBody:
        """The body of argv, a list of strings (called `what`), at run_at (or the request's)."""
        argv = _check_exec(self._env_bytes, argv, what)
        made = self._bodies.make(
            new_id(self._now), argv, self._run_at if run_at is None else run_at
        )
        _check_file(made.to_json())
        return made


def _requested_fields(request: Request) -> dict[str, Any]:
    return {name: getattr(request, name) for name in REQUESTED}


_requested = LastOf(_requested_fields)  # a batch's lines share one request: read once


def accepted(body: TaskBody) -> bytes:
    """The body's file, once every limit is checked; BadInput names the first broken one.

    The checks are the daemon's reader's own (spool/fields.py), so a task
    that reader would refuse is never accepted. A Former makes the same
    checks, those of the request's fields once for all its bodies.
    """
    _check_exec(_shared_checks(body.__dict__), body.argv)
    return _check_file(body.to_json())


def _shared_checks(values: Mapping[str, Any]) -> int:
    """The checks of what a body takes from its request; what its variables take of exec()."""
    fields.utf8_text("the working directory", values["cwd"])
    mailto = values["env"].get("MAILTO")
    if mailto and mail_problem(mailto) is not None:
        raise BadInput(f"MAILTO {mailto!r} {mail_problem(mailto)}")
    if values["key"] is not None:
        fields.utf8_text("the key", values["key"])
    return _env_bytes(values["env"])


def _check_exec(env_bytes: int, argv: object, what: str = "argv") -> list[str]:
    """argv, a command (fields.command) that exec() could take with variables of env_bytes."""
    command, size = fields.command(argv, what)
    exec_bytes = env_bytes + size
    if exec_bytes > MAX_EXEC:
        raise BadInput(
            f"the command and its variables take {exec_bytes} bytes; exec() is given "
            f"at most {MAX_EXEC}"
        )
    return command


def _check_file(data: bytes) -> bytes:
    """A body's file, if within the size the daemon reads."""
    if len(data) > MAX_BODY:
        raise BadInput(
            f"the task file would be {len(data)} bytes (escapes included), over the "
            f"limit of {MAX_BODY}"
        )
    return data


def _check_env(env: Mapping[str, str]) -> int:
    """What the variables take of exec()'s room, each checked as text."""
    return fields.environment(env)[1]


_env_bytes = LastOf(_check_env)  # a batch's bodies share their request's env: checked once


def run_at(
    at: str | None, delay: int | None, now: int, names: tuple[str, str] = ("--at", "--in")
) -> int:
    """The run time: at (a WHEN), or now + delay, or now; names say how both were given."""
    if at is not None and delay is not None:
        raise BadInput(f"give {names[0]} or {names[1]}, not both")
    if at is not None:
        # Only for --at: at(1)'s grammar and the zones (zoneinfo) stay out of
        # the start-up of a plain submit (tests/e2e/test_submit.py, its budget).
        from taskq.times.when import parse_when

        return parse_when(at, now)
    return now + (delay or 0)


def positive(what: str, us: int) -> int:
    """A duration that must be longer than zero (--timeout, --expires, --lease...)."""
    if us <= 0:
        raise BadInput(f"{what} must be longer than zero")
    return us


def environment(
    pairs: Iterable[tuple[str, str]], recorded: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A task's variables: the default PATH, the recorded ones, then the pairs; within MAX_ENV."""
    return check_size({"PATH": DEFAULT_PATH, **(recorded or {}), **dict(pairs)})


def check_size(env: Mapping[str, str]) -> dict[str, str]:
    """env, if it fits in MAX_ENV bytes; BadInput otherwise (nothing is submitted)."""
    size = sum(len(f"{k}={v}".encode(errors="surrogatepass")) + 1 for k, v in env.items())
    if size > MAX_ENV:
        raise BadInput(
            f"the task's environment is {size} bytes, over the limit of {MAX_ENV}: "
            "unset some variables, or give --no-env"
        )
    return dict(env)


def mail_problem(mailto: str) -> str | None:
    """Why MAILTO cannot name a mail recipient, or None if it can.

    It goes into a To: header for `sendmail -t`: a newline there would be
    a header of the submitter's choosing, and the mail library refuses it.
    """
    if not mailto.isprintable():
        return "cannot be a mail recipient: it holds a control character"
    return None


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
