"""Turn spool lookups into what the CLI prints: tables and JSON objects.

JSON is always UTC (ISO-8601, Z); the text forms print instants through a
stamp, UTC by default or local with its offset (--local, TASKQ_TIMEFMT).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

from taskq.spool import journal
from taskq.spool.journal import Event
from taskq.spool.layout import Located
from taskq.spool.listing import Row
from taskq.spool.resources import Resources
from taskq.spool.task import TaskBody
from taskq.text.quote import quote
from taskq.text.shell import command_line
from taskq.times.timespec import SECOND, format_duration, format_iso, parse_compact
from taskq.times.when import parse_when

Stamp = Callable[[int], str]  # an instant as text: format_iso, or zones.format_local
_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def restamp(text: str, stamp: Stamp) -> str:
    """text with every UTC instant in it (as taskq writes them) shown through stamp."""
    if stamp is format_iso:
        return text
    return _INSTANT.sub(lambda m: stamp(parse_when(m.group(0), 0)), text)


def summary(found: Located, body: TaskBody | None) -> dict[str, Any]:
    """The ls --json object of a task (show --json adds more)."""
    return {
        "id": found.name.id,
        "state": found.state,
        "run_at": format_iso(found.name.run_at),
        "attempt": found.name.attempt,
        "queue": body.queue if body else None,
        "command": body.argv if body else None,
        "after": body.after if body else [],
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
        umask=None if body.umask is None else f"{body.umask:04o}",
        env_recorded=body.env_recorded,
        after_mode="any" if body.after_any else "ok",
        mail=body.mail,
        priority=body.priority,
        limits=None if body.limits is None else body.limits.to_doc(),
        expired=journal.expired(records),
        exit_status=journal.exit_status(records),
        budget_from=journal.budget_start(records, found.name.attempt),
        path=found.path,
        attempts=records,
    )
    if found.claim is not None:
        doc["owner"] = found.claim.daemon  # the key `show --json` has always had
        doc["lease_expiry"] = format_iso(found.claim.expiry)
    return doc


def ls_header(with_command: bool = True, stamp: Stamp = format_iso) -> str:
    """The header line of ls: RUN_AT is wider for local times, which carry an offset."""
    width = 24 if stamp is format_iso else 29
    line = f"{'ID':<26}  {'STATE':<10}  {'RUN_AT':<{width}}  TRY  {'QUEUE':<8}"
    return f"{line}  COMMAND" if with_command else line.rstrip()


def ls_line(row: Row, with_command: bool = True, stamp: Stamp = format_iso) -> str:
    """One ls line, in fixed-width columns (a stream cannot measure its widest cell)."""
    c = row.compact
    if stamp is format_iso:
        run_at = f"{c[0:4]}-{c[4:6]}-{c[6:8]}T{c[9:11]}:{c[11:13]}:{c[13:15]}{c[15:19]}Z"
    else:  # local time with its offset, to the millisecond
        run_at = re.sub(r"(\.\d{3})\d{3}", r"\1", stamp(parse_compact(c)))
    width = 24 if stamp is format_iso else 29
    line = f"{row.id}  {row.state:<10}  {run_at:<{width}}  {row.attempt:<3}  {row.queue:<8}"
    if not with_command:
        return line.rstrip()
    command = command_line(tuple(row.command)) if row.command else "?"
    if row.after:
        command += f"  (after {','.join(row.after)})"
    return f"{line}  {command}"


def stats_text(doc: dict[str, Any], stamp: Stamp = format_iso) -> str:
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
    out.extend(paused_line(p) for p in doc.get("paused", []))
    out.extend(f"daemon {daemon_line(r, stamp)}" for r in doc["daemons"])
    return "\n".join(out)


def paused_line(p: dict[str, Any]) -> str:
    """A paused queue on one line, as `taskq stats` and `taskq status` print it."""
    until = "until resumed" if p["until"] is None else f"until {p['until']}"
    return f"paused: queue {p['queue']} {until} (since {p['paused_at']})"


def permit_line(p: dict[str, Any], stamp: Stamp = format_iso) -> str:
    """A held permit on one line, as `taskq status` prints it."""
    what = {"queue": "limit of queue", "mutex": "mutex", "rate": "rate of queue"}[str(p["kind"])]
    since, until = (restamp(str(p[k]), stamp) for k in ("since", "lease_expiry"))
    return (
        f"permit {p['permit']} ({what} {p['name']}): task {p['task']}, "
        f"held by {p['owner']} since {since} (lease until {until})"
    )


def daemon_line(r: dict[str, Any], stamp: Stamp = format_iso) -> str:
    """One daemon's health record on one line, as `taskq status` prints it."""
    state = "dispatching" if r.get("dispatching") else f"NOT dispatching ({r.get('reason')})"
    if r.get("alive") is False:
        state = "NOT running (stale record of a daemon that died)"
    updated = restamp(str(r.get("updated_at")), stamp)
    return (
        f"{r.get('owner')}: {state}; clock uncertainty {r.get('uncertainty', 0):.6f}s "
        f"(offset {r.get('offset', 0):+.6f}s, max {r.get('max_uncertainty')}s); "
        f"{r.get('busy')}/{r.get('workers')} workers busy; "
        f"claims {r.get('claims_won', 0)} won, {r.get('claims_lost', 0)} lost; "
        f"{_cgroups(r)}updated {updated}"
    )


def _cgroups(r: dict[str, Any]) -> str:
    """What a daemon can confine attempts with; nothing for a daemon too old to say."""
    if "cgroups" not in r:
        return ""
    if r["cgroups"] is None:
        return f"no cgroups ({r.get('cgroups_problem')}); "
    controllers = str(r.get("cgroup_controllers", "")).replace(" ", ", ")
    return f"cgroup {r['cgroups']} ({controllers}); "


def describe(doc: dict[str, Any], stamp: Stamp = format_iso) -> str:
    """The human form of show: fields, then one line per journal record.

    Each line is one line of printable text whatever the task file or its
    journal held (text.quote): a command's newline must not forge a field.
    """
    state = doc["state"] + (" (expired)" if doc["expired"] else "")
    fields = [
        ("id", doc["id"]),
        ("state", state),
        ("command", command_line(tuple(doc["command"]))),
        ("run_at", restamp(doc["run_at"], stamp)),
        ("submitted", restamp(doc["submitted_at"], stamp)),
        ("queue", doc["queue"]),
        ("attempt", _attempt_text(doc)),
        ("cwd", doc["cwd"]),
        ("env", _env_text(doc)),
        ("umask", doc["umask"] or "not recorded (the daemon's)"),
    ]
    for opt in ("key", "timeout", "expires", "mail", "owner", "lease_expiry"):
        if doc.get(opt) is not None:
            fields.append((opt, restamp(str(doc[opt]), stamp)))
    if doc.get("priority"):
        fields.append(("priority", str(doc["priority"])))
    if doc.get("limits"):
        fields.append(("limits", Resources(**doc["limits"]).describe()))
    if doc.get("after"):
        fields.append(("after", _after_text(doc)))
    # The command is quoted already, as a shell line (text.shell); the rest here.
    out = [f"{k + ':':<11}{v if k == 'command' else quote(str(v))}" for k, v in fields]
    out.extend(restamp(quote(_journal_line(r)), stamp) for r in doc["attempts"])
    return "\n".join(out)


def _env_text(doc: dict[str, Any]) -> str:
    """What the env field holds: recorded at submit, or only PATH and --env."""
    count = len(doc["env"])
    noun = "variable" if count == 1 else "variables"
    if doc["env_recorded"]:
        return f"{count} {noun}, recorded at submit (taskq show --env ID prints them)"
    return f"not recorded (--no-env): {count} {noun}, PATH and --env (taskq show --env ID)"


def env_lines(env: dict[str, str]) -> str:
    """A task's variables, one NAME=VALUE a line, each value quoted for sh(1) if it needs it."""
    return "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def _after_text(doc: dict[str, Any]) -> str:
    """'01H.. (done), 01J.. (running); runs only if all are done'."""
    deps = ", ".join(f"{d['id']} ({d['state']})" for d in doc["after"])
    rule = "runs however they end" if doc["after_mode"] == "any" else "runs only if all are done"
    return f"{deps}; {rule}"


def _attempt_text(doc: dict[str, Any]) -> str:
    """'2 of 3', or after an operator's retry '5 (2 of 3 since the retry)'."""
    first, attempt, most = doc["budget_from"], doc["attempt"], doc["max_attempts"]
    if first <= 1:
        return f"{attempt} of {most}"
    return f"{attempt} ({attempt - first + 1} of {most} since the retry)"


def _journal_line(r: dict[str, Any]) -> str:
    extra = {k: v for k, v in r.items() if k not in ("event", "time", "attempt")}
    if r["event"] == Event.START and isinstance(r.get("lateness"), int | float):
        extra["lateness"] = format_duration(round(r["lateness"] * SECOND))
    details = " ".join(f"{k}={v}" for k, v in extra.items() if v is not None)
    return f"  {r['time']}  #{r.get('attempt', '-')} {r['event']} {details}".rstrip()
