"""Mail about an ended task, as at(1) and cron send it: whether, to whom, and what.

--mail failure|always|never says when; without it, MAILTO in the task's
environment makes it `failure` (cron's habit; an empty MAILTO means
never), and no MAILTO means never. The recipient is MAILTO, else the
owner of the task file (the submitter), delivered by the local MTA. A
failure is a task in failed/ (attempts exhausted or expired) or one
cancelled because a dependency failed; an operator's cancel is not. The
message carries the event's facts and the tail of the last attempt's
output. Sending is the teller's job (`sendmail -t`).
"""

from __future__ import annotations

import pwd
import shlex
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.states import State
from taskq.spool.task import TaskBody

TAIL_BYTES = 4096  # of the last attempt's output, in the message
TAIL_LINES = 40


def recipient(
    body: TaskBody, state: str, reason: str | None, owner: Callable[[], int]
) -> str | None:
    """Whom to mail about this end, or None; owner() gives the task file's uid."""
    mailto = body.env.get("MAILTO")
    mode = body.mail or ("failure" if mailto else "never")
    if mode == "never" or (mode == "failure" and not is_failure(state, reason)):
        return None
    return mailto or _user(owner())


def is_failure(state: str, reason: str | None) -> bool:
    if state == State.FAILED:
        return True
    return state == State.CANCELLED and (reason or "").startswith("dependency ")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def message(doc: dict[str, Any], to: str, headline: str) -> bytes:
    """The message for `sendmail -t`: headers naming the recipient, then the facts."""
    msg = EmailMessage()
    msg["To"] = to
    command = shlex.join(doc["command"] or ["?"])
    msg["Subject"] = f"taskq: {headline}: {command}"[:200]
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Taskq-Id"] = doc["id"]
    facts = [
        ("task", doc["id"]),
        ("state", doc["state"] + (" (expired)" if doc["expired"] else "")),
        ("reason", doc["reason"]),
        ("command", command),
        ("queue", doc["queue"]),
        ("exit status", doc["exit_status"]),
        ("signal", doc["signal"]),
        ("attempts", doc["attempts"]),
        ("host", doc["host"]),
        ("run_at", doc["run_at"]),
        ("lateness", doc["lateness"]),
        ("duration", doc["duration"]),
        ("output", doc["output"]),
    ]
    lines = [f"{k + ':':<13}{v}" for k, v in facts if v is not None]
    tail = output_tail(doc["output"])
    if tail:
        lines += ["", f"Last lines of the output ({doc['output']}):", "", tail]
    msg.set_content("\n".join(lines) + "\n")
    return bytes(msg)


def schedule_message(doc: dict[str, Any], to: str) -> bytes:
    """The message telling that a schedule was paused by its failures."""
    msg = EmailMessage()
    msg["To"] = to
    msg["Subject"] = f"taskq: schedule {doc['schedule']} paused after {doc['failures']} failures"
    msg["Auto-Submitted"] = "auto-generated"
    lines = [f"{k + ':':<13}{v}" for k, v in doc.items() if v is not None]
    lines += ["", f"taskq schedule resume {doc['schedule']}  # when it is fixed"]
    msg.set_content("\n".join(lines) + "\n")
    return bytes(msg)


def output_tail(path: str | None) -> str:
    """The last lines of an attempt's output, at most TAIL_BYTES of it."""
    if path is None:
        return ""
    try:
        data = fsutil.read_tail(path, TAIL_BYTES)
    except (OSError, CorruptFile):  # gone, or no regular file (a FIFO would block)
        return ""
    text = data.decode(errors="replace")
    return "\n".join(text.splitlines()[-TAIL_LINES:])
