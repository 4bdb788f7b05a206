"""Turn spool lookups into what the CLI prints: tables and JSON objects."""

from __future__ import annotations

import functools
import shlex
from typing import Any

from taskq import journal
from taskq.listing import Row
from taskq.spool import Located
from taskq.task import TaskBody
from taskq.timespec import SECOND, format_duration, format_iso


def summary(found: Located, body: TaskBody | None) -> dict[str, Any]:
    """The ls --json object of a task (show --json adds more)."""
    return {
        "id": found.name.id,
        "state": found.state,
        "run_at": format_iso(found.name.run_at),
        "attempt": found.name.attempt,
        "queue": body.queue if body else None,
        "command": body.argv if body else None,
    }


def detail(found: Located, body: TaskBody, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The show --json object: the summary, the body's fields and the journal."""
    doc = summary(found, body)
    doc.update(
        original_run_at=format_iso(body.run_at),
        submitted_at=format_iso(body.submitted_at),
        cwd=body.cwd,
        env=body.env,
        key=body.key,
        max_attempts=body.max_attempts,
        timeout=None if body.timeout is None else body.timeout / SECOND,
        expires=None if body.expires is None else body.expires / SECOND,
        stdin_bytes=None if body.stdin is None else len(body.stdin),
        expired=journal.expired(records),
        budget_from=journal.budget_start(records, found.name.attempt),
        path=found.path,
        attempts=records,
    )
    if found.claim is not None:
        doc["owner"] = found.claim.owner
        doc["lease_expiry"] = format_iso(found.claim.expiry)
    return doc


LS_HEADER = f"{'ID':<26}  {'STATE':<10}  {'RUN_AT':<24}  TRY  {'QUEUE':<8}  COMMAND"


def ls_line(row: Row, with_command: bool = True) -> str:
    """One ls line, in fixed-width columns (a stream cannot measure its widest cell)."""
    c = row.compact
    run_at = f"{c[0:4]}-{c[4:6]}-{c[6:8]}T{c[9:11]}:{c[11:13]}:{c[13:15]}{c[15:19]}Z"
    line = f"{row.id}  {row.state:<10}  {run_at}  {row.attempt:<3}  {row.queue:<8}"
    if not with_command:
        return line.rstrip()
    return f"{line}  {_shell_line(tuple(row.command)) if row.command else '?'}"


@functools.lru_cache(maxsize=1024)
def _shell_line(argv: tuple[str, ...]) -> str:
    """A command as a shell would read it, on one line (many tasks share theirs)."""
    return shlex.join(argv).replace("\n", "\\n")


def stats_text(doc: dict[str, Any]) -> str:
    """The human form of stats: a state-by-queue table, backlog, lateness, daemons."""
    queues = sorted({q for per in doc["counts"].values() for q in per})
    rows = [("STATE", "TOTAL", *queues)]
    for state, per in doc["counts"].items():
        rows.append((state, str(sum(per.values())), *(str(per.get(q, 0)) for q in queues)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    if doc["overdue_total"]:
        per = ", ".join(f"{q} {v['count']}" for q, v in doc["overdue"].items())
        age = format_duration(round(doc["oldest_overdue_age"] * SECOND))
        out.append(f"overdue: {doc['overdue_total']} ({per}); oldest overdue for {age}")
    else:
        out.append("overdue: none")
    late = doc["lateness"]
    if late["attempts"]:
        parts = " ".join(
            f"{k} {format_duration(round(late[k] * SECOND))}" for k in ("p50", "p90", "p99", "max")
        )
        out.append(f"lateness of the last {late['attempts']} attempts: {parts}")
    out.extend(f"daemon {daemon_line(r)}" for r in doc["daemons"])
    return "\n".join(out)


def daemon_line(r: dict[str, Any]) -> str:
    """One daemon's health record on one line, as `taskq status` prints it."""
    state = "dispatching" if r.get("dispatching") else f"NOT dispatching ({r.get('reason')})"
    if r.get("alive") is False:
        state = "NOT running (stale record of a daemon that died)"
    return (
        f"{r.get('owner')}: {state}; clock uncertainty {r.get('uncertainty', 0):.6f}s "
        f"(offset {r.get('offset', 0):+.6f}s, max {r.get('max_uncertainty')}s); "
        f"{r.get('busy')}/{r.get('workers')} workers busy; updated {r.get('updated_at')}"
    )


def describe(doc: dict[str, Any]) -> str:
    """The human form of show: fields, then one line per journal record."""
    state = doc["state"] + (" (expired)" if doc["expired"] else "")
    fields = [
        ("id", doc["id"]),
        ("state", state),
        ("command", shlex.join(doc["command"])),
        ("run_at", doc["run_at"]),
        ("submitted", doc["submitted_at"]),
        ("queue", doc["queue"]),
        ("attempt", _attempt_text(doc)),
        ("cwd", doc["cwd"]),
    ]
    for opt in ("key", "timeout", "expires", "owner", "lease_expiry"):
        if doc.get(opt) is not None:
            fields.append((opt, str(doc[opt])))
    out = [f"{k + ':':<11}{v}" for k, v in fields]
    out.extend(_journal_line(r) for r in doc["attempts"])
    return "\n".join(out)


def _attempt_text(doc: dict[str, Any]) -> str:
    """'2 of 3', or after an operator's retry '5 (2 of 3 since the retry)'."""
    first, attempt, most = doc["budget_from"], doc["attempt"], doc["max_attempts"]
    if first <= 1:
        return f"{attempt} of {most}"
    return f"{attempt} ({attempt - first + 1} of {most} since the retry)"


def _journal_line(r: dict[str, Any]) -> str:
    extra = {k: v for k, v in r.items() if k not in ("event", "time", "attempt")}
    if r["event"] == "start" and isinstance(r.get("lateness"), int | float):
        extra["lateness"] = format_duration(round(r["lateness"] * SECOND))
    details = " ".join(f"{k}={v}" for k, v in extra.items() if v is not None)
    return f"  {r['time']}  #{r.get('attempt', '-')} {r['event']} {details}".rstrip()
