"""The JSON event of an ended task, as hooks and mail see it; pure, from the journal.

One object per task that ended (done, failed, cancelled): its id, state,
why, the last attempt's exit status or signal, host, lateness and
duration, how many attempts started, when it was due, and where its logs
are. Everything comes from the task's name, body and journal records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from taskq.spool import journal
from taskq.spool.journal import Event
from taskq.spool.layout import journal_path, out_path
from taskq.spool.states import State
from taskq.spool.task import TaskBody, TaskName
from taskq.times.timespec import format_iso


@dataclass(frozen=True)
class Ended:
    """A task that reached an end state: its name, that state and its file there."""

    name: TaskName
    state: State  # done, failed or cancelled
    path: str
    reason: str | None = None  # why, when the mover knows (a dependency's end)
    body: TaskBody | None = None  # when the mover has it at hand (saves the teller a read)


def build(
    ended: Ended, body: TaskBody | None, records: list[dict[str, Any]], log_dir: str, now: int
) -> dict[str, Any]:
    """The event object (documented in taskq-spool(5), NOTIFICATIONS)."""
    starts = [r for r in records if r["event"] == Event.START]
    ends = [r for r in records if r["event"] == Event.END]
    start = starts[-1] if starts else {}
    end = ends[-1] if ends else {}
    attempt = start.get("attempt")
    output = out_path(log_dir, attempt) if attempt else None
    return {
        "event": "ended",
        "id": ended.name.id,
        "state": ended.state,
        "expired": journal.expired(records),
        "reason": ended.reason or _reason(records),
        "queue": ended.name.queue,
        "command": body.argv if body else None,
        "exit_status": end.get("exit_status"),
        "signal": end.get("signal"),
        "attempts": len(starts),
        "host": start.get("host"),
        "run_at": start.get("run_at", format_iso(ended.name.run_at)),
        "started_at": start.get("time"),
        "lateness": start.get("lateness"),
        "duration": end.get("duration"),
        "ended_at": format_iso(now),
        "submitted_at": format_iso(body.submitted_at) if body else None,
        "log_dir": log_dir,
        "output": output,
        "journal": journal_path(log_dir),
        "path": ended.path,
    }


def _reason(records: list[dict[str, Any]]) -> str | None:
    for r in reversed(records):
        if r["event"] in (Event.DEAD, Event.CANCELLED) and isinstance(r.get("reason"), str):
            return str(r["reason"])
        if r["event"] == Event.EXPIRED:
            return "expired"
    return None


def summary(doc: dict[str, Any]) -> str:
    """One line: id, state and how, e.g. "01H... failed (exit status 7)"."""
    how = ""
    if doc["expired"]:
        how = " (expired)"
    elif doc["signal"] is not None:
        how = f" (killed by signal {doc['signal']})"
    elif doc["exit_status"] is not None and doc["state"] != State.DONE:
        how = f" (exit status {doc['exit_status']})"
    elif doc["reason"] and doc["state"] != State.DONE:
        how = f" ({doc['reason']})"
    return f"{doc['id']} {doc['state']}{how}"


def json_line(doc: dict[str, Any]) -> str:
    """The event as one line of JSON, as a hook reads it on standard input."""
    return json.dumps(doc, separators=(",", ":")) + "\n"
