"""What `taskq schedule show` prints: a schedule, its recent occurrences, its next run.

Reads the schedule's files and its journal, and the state of each recent
occurrence's task (each found by its id). No changes.
"""

from __future__ import annotations

import json
from typing import Any

from taskq.schedules.slots import local_text
from taskq.schedules.store import Store
from taskq.spool import deps
from taskq.spool.task import valid_id
from taskq.times.timespec import format_iso

RECENT = 20  # occurrences shown


def detail(store: Store, name: str, now: int) -> dict[str, Any]:
    """The schedule as a JSON-ready document."""
    sched = store.read(name)
    doc: dict[str, Any] = json.loads(sched.to_json())
    nxt = None if sched.paused else sched.spec.after(max(now, sched.since - 1))
    doc["next"] = None if nxt is None else format_iso(nxt)
    doc["next_local"] = None if nxt is None else local_text(nxt, sched.spec.tz)
    doc["occurrences"] = _occurrences(store, name)
    return doc


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
        if event == "skipped":
            entry["outcome"] = "skipped"
            entry["why"] = record.get("why")
            if "count" in record:
                entry["count"] = record["count"]
                entry["after"] = record.get("after")
        elif event == "queued":
            entry.setdefault("note", "queued behind the previous run")
    recent = sorted(by_slot.values(), key=lambda e: str(e["slot"]))[-RECENT:]
    states = _task_states(store, {str(e["task"]) for e in recent if "task" in e})
    for entry in recent:
        if "task" in entry and entry.get("outcome") != "skipped":
            entry["outcome"] = states.get(str(entry["task"]), "gone")
    return recent


def _task_states(store: Store, ids: set[str]) -> dict[str, str]:
    return deps.states_of(store.spool, sorted(i for i in ids if valid_id(i)))


def describe(doc: dict[str, Any]) -> str:
    """The document as text for people."""
    when = doc["cron"] if doc["cron"] else f"every {doc['every']}s"
    lines = [
        f"name:      {doc['name']}",
        f"when:      {when} ({doc['tz']})",
        f"catchup:   {doc['catchup']}    overlap: {doc['overlap']}    jitter: {doc['jitter']}s",
        f"command:   {' '.join(doc['task']['argv'])}",
        f"state:     {'paused' if doc['paused'] else 'active'}",
        f"next:      {doc['next'] or 'none'}" + (f"  ({doc['next_local']})" if doc["next"] else ""),
        "occurrences:",
    ]
    for e in doc["occurrences"]:
        extra = ""
        if e.get("why"):
            extra = f" ({e['why']})"
        if e.get("count"):
            extra += f" {e['count']} slots after {e['after']}"
        lines.append(f"  {e['slot']}  {e.get('outcome', '?'):<10} {e.get('task', '')}{extra}")
    return "\n".join(lines)
