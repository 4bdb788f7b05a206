"""What `taskq schedule show` prints: a schedule, its recent occurrences, its next run.

Reads the schedule's files and its journal, and the state of each recent
occurrence's task (each found by its id). No changes.
"""

from __future__ import annotations

import json
from typing import Any

from taskq.schedules import following
from taskq.schedules.ends import auto_paused, health
from taskq.schedules.materialise import skipped_by_operator
from taskq.schedules.slots import local_text
from taskq.schedules.store import Cursor, Schedule, Store
from taskq.spool import deps
from taskq.spool.journal import Event
from taskq.spool.states import State
from taskq.spool.task import valid_id
from taskq.text.quote import quote
from taskq.text.shell import command_line
from taskq.times.timespec import format_duration, format_iso

MAX_SKIP = 10_000  # `schedule skip -n` at most

RECENT = 20  # occurrences shown


def detail(store: Store, name: str, now: int) -> dict[str, Any]:
    """The schedule as a JSON-ready document."""
    sched = store.read(name)
    state = store.state(name, sched.since)
    doc: dict[str, Any] = json.loads(sched.to_json())
    nxt = next_slot(sched, state, now)
    doc["state"] = status(sched, state, nxt)
    doc["when"] = when_text(sched)
    doc["next"] = None if nxt is None else format_iso(nxt)
    doc["next_local"] = None if nxt is None else local_text(nxt, sched.spec.tz)
    doc["health"] = health(sched, state)
    doc["occurrences"] = _occurrences(store, name)
    return doc


def status(sched: Schedule, state: Cursor, nxt: int | None) -> str:
    """active, paused, paused (failures), skipping (until the next slot) or ended."""
    if sched.paused:
        return "paused"
    if auto_paused(sched, state):
        return "paused (failures)"
    if nxt is None:
        return "ended"
    return "active"


def next_slot(sched: Schedule, state: Cursor, now: int) -> int | None:
    """The next slot that will run (past those `schedule skip` covers); None if none."""
    found = upcoming(sched, state, now, 1, skipped=False)
    return found[0][0] if found else None


def upcoming(
    sched: Schedule, state: Cursor, now: int, n: int, skipped: bool = True
) -> list[tuple[int, bool]]:
    """The next n slots and whether each is skipped (`schedule skip`); none while paused."""
    if sched.paused or auto_paused(sched, state):
        return []
    if sched.every_after:  # arithmetic: cheap to look past the skipped ones
        slots = following.upcoming(sched, state, now, n + (0 if skipped else _skips(sched, now)))
    else:
        start = max(now, sched.since - 1)
        if not skipped and sched.skip_before is not None:
            start = max(start, sched.skip_before - 1)
        slots = sched.when.upcoming(start, n)
    out = [(s, skipped_by_operator(sched, s)) for s in slots]
    return [e for e in out if skipped or not e[1]][:n]


def _skips(sched: Schedule, now: int) -> int:
    """How many slots to look past for those skipped (bounded: -n is at most MAX_SKIP)."""
    return 0 if sched.skip_before is None or sched.skip_before <= now else MAX_SKIP


def when_text(sched: Schedule) -> str:
    """How the schedule's slots are given, in one line."""
    if sched.crons:
        text = " | ".join(sched.crons)
    else:
        every = format_duration(sched.spec.every or 0)
        text = f"{'every-after' if sched.every_after else 'every'} {every}"
    if sched.except_cron:
        text += " except " + " | ".join(sched.except_cron)
    if sched.except_dates:
        text += " except on " + ", ".join(sched.except_dates)
    return text


def _occurrences(store: Store, name: str) -> list[dict[str, Any]]:
    """The latest slots journalled, each once: made (with its task's state) or skipped."""
    by_slot: dict[str, dict[str, Any]] = {}
    for record in store.history(name):
        slot = record.get("slot") or record.get("before")
        if not isinstance(slot, str):
            continue
        entry = by_slot.setdefault(slot, {"slot": slot})
        if record.get("task"):
            entry["task"] = record["task"]
        event = record.get("event")
        if event == Event.SKIPPED:
            entry["outcome"] = "skipped"
            entry["why"] = record.get("why")
            if "count" in record:
                entry["count"] = record["count"]
                entry["after"] = record.get("after")
        elif event == Event.QUEUED:
            entry.setdefault("note", "queued behind the previous run")
        elif event == "replacing":
            entry.setdefault("note", "stopped the previous run")
        elif event in ("manual", "backfilled"):
            entry["kind"] = event
    recent = sorted(by_slot.values(), key=lambda e: str(e["slot"]))[-RECENT:]
    states = _task_states(store, {str(e["task"]) for e in recent if "task" in e})
    for entry in recent:
        if "task" in entry and entry.get("outcome") != "skipped":
            entry["outcome"] = states.get(str(entry["task"]), "gone")
    return recent


def _task_states(store: Store, ids: set[str]) -> dict[str, State]:
    return deps.states_of(store.spool, sorted(i for i in ids if valid_id(i)))


def describe(doc: dict[str, Any]) -> str:
    """The document as text for people."""
    h = doc["health"]
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(h["skipped"].items()) if v) or "none"
    lines = [
        f"name:      {doc['name']}",
        f"when:      {doc['when']} ({doc['tz']})",
        f"catchup:   {doc['catchup']}    overlap: {doc['overlap']}    jitter: {doc['jitter']}s",
        f"command:   {command_line(tuple(doc['task']['argv']))}",
        f"state:     {doc['state']}"
        + (f" (skipping slots before {doc['skip_before']})" if doc["skip_before"] else ""),
        f"next:      {doc['next'] or 'none'}" + (f"  ({doc['next_local']})" if doc["next"] else ""),
        f"health:    last success {h['last_success'] or 'never'}; "
        f"{h['failures_in_a_row']} failed in a row; missed {h['missed']}; skipped {skipped}",
        "occurrences:",
    ]
    for e in doc["occurrences"]:
        extra = ""
        if e.get("why"):
            extra = f" ({quote(str(e['why']))})"
        if e.get("count"):
            extra += f" {e['count']} slots after {e['after']}"
        lines.append(f"  {e['slot']}  {e.get('outcome', '?'):<10} {e.get('task', '')}{extra}")
    return "\n".join(lines)
