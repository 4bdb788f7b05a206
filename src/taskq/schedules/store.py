"""A recurring schedule's files in the spool: its request, its state, its journal.

SPOOL/schedules/NAME/ holds three files (taskq-spool(5) SCHEDULES):

- `schedule.json`: what the operator asked for (when, the policies, the
  task to run), written only by `taskq schedule` commands, whole, by
  write-fsync-rename. Readable and repairable by hand.
- `state.json`: the materialisers' cursor (the latest slot made a task,
  the occurrence before it, a queued occurrence), written by whichever
  process materialises, whole, by write-fsync-rename. It is a cache of
  decisions the idempotency keys make exact; losing it, the cursor is
  recovered from the journal (last_decided), since the keys of old slots
  go with their tasks at retention: it can cost an overlap decision,
  never a second task for one slot.
- `journal`: history, one JSON line per event (materialised, skipped,
  held, released, paused...), as a task's journal is.

This module owns the formats and the paths; the decisions are
materialise.py's, the times slots.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from typing import Any

from taskq.errors import BadInput, Conflict, CorruptFile, NotFound, TaskqError
from taskq.schedules.rules import Rules, check_date
from taskq.schedules.slots import Spec, check_bound, check_cron, check_zone
from taskq.spool import fields, fsutil, journal, record
from taskq.spool.journal import Event
from taskq.spool.layout import CURSOR_FILE, SCHEDULE_FILE, Spool
from taskq.spool.task import Request, TaskBody, TaskName, check_id, new_id
from taskq.text.quote import quote
from taskq.times.timespec import SECOND, format_iso

VERSION = 1
DECIDED = (Event.MADE, Event.CAUGHT_UP, Event.SKIPPED)  # journal events that decide a slot
MAX_FILE = 4 << 20
CATCHUP = re.compile(r"(skip|latest|all)(?::([1-9]\d{0,5}))?")
OVERLAP = ("skip", "queue", "allow", "replace")
MAX_RULES = 64  # cron expressions, exclusions or dates in one schedule
MAX_FAILURES = 1000
MAX_LIVE = 10_000  # occurrences let run whose end is awaited (overlap allow, backfills)
SKIP_REASONS = ("catchup", "overlap", "paused", "skip", "replaced")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(name: str) -> str:
    """A schedule name: letters, digits, '.', '_', '-'; at most 64."""
    if _NAME.fullmatch(name) is None:
        raise BadInput(f"bad schedule name {name!r}: use letters, digits, '.', '_' or '-' (max 64)")
    return name


def check_catchup(text: str) -> str:
    """skip, latest, all or all:N."""
    if CATCHUP.fullmatch(text) is None or text.startswith(("skip:", "latest:")):
        raise BadInput(f"bad --catchup {text!r}: expected skip, latest, all or all:N")
    return text


def catchup_keep(policy: str) -> int:
    """How many missed slots a catch-up policy runs (the latest ones)."""
    m = CATCHUP.fullmatch(policy)
    assert m is not None
    if m.group(1) == "skip":
        return 0
    if m.group(1) == "latest":
        return 1
    return int(m.group(2) or 1000)


@dataclass(frozen=True)
class Schedule:
    """schedule.json: when, how, and the task each occurrence is."""

    name: str
    spec: Spec
    catchup: str
    overlap: str
    jitter: int  # microseconds
    task: TaskBody  # the template: argv and the submit options; id and times unused
    created: int
    since: int  # slots before this are never run (creation, or the last resume)
    paused: bool = False
    also: tuple[str, ...] = ()  # more --cron expressions: the slots are the union
    except_cron: tuple[str, ...] = ()  # slots these name too are not run
    except_dates: tuple[str, ...] = ()  # nor slots on these local dates
    every_after: bool = False  # spec.every counts from the end of the previous run
    pause_after: int | None = None  # pause after this many failed occurrences in a row
    skip_before: int | None = None  # `schedule skip`: slots before this are skipped

    @property
    def when(self) -> Rules:
        """The slots: the union of the expressions, less the exclusions."""
        specs = (self.spec, *(replace(self.spec, cron=c) for c in self.also))
        tz = self.spec.tz
        excluded = tuple(Spec(cron=c, every=None, tz=tz, anchor=0) for c in self.except_cron)
        return Rules(specs, excluded, frozenset(self.except_dates))

    @property
    def crons(self) -> list[str]:
        return [] if self.spec.cron is None else [self.spec.cron, *self.also]

    def request(
        self, slot: int, run_at: int, key: str | None = None, after: list[str] | None = None
    ) -> Request:
        """The request of the occurrence at slot: the template's, at run_at, with its key.

        key: another key than the slot's (a manual run's); after: tasks it
        starts after, whatever their end (a manual run that queues).
        """
        env = {**self.task.env, "TASKQ_SCHEDULE": self.name, "TASKQ_SCHEDULED_AT": format_iso(slot)}
        return record.replace(
            self.task,
            run_at=run_at,
            env=env,
            key=key or occurrence_key(self.name, slot),
            after=after or [],
            after_any=bool(after),
        )

    def to_json(self) -> bytes:
        s = self.spec
        task = json.loads(self.task.to_json())
        for unused in ("version", "id", "key", "run_at", "submitted_at"):
            del task[unused]
        every = None if s.every is None else s.every / SECOND
        crons = self.crons
        doc = {
            "version": VERSION,
            "name": self.name,
            "cron": crons[0] if len(crons) == 1 else (crons or None),
            "every": None if self.every_after else every,
            "every_after": every if self.every_after else None,
            "except_cron": list(self.except_cron),
            "except": list(self.except_dates),
            "tz": s.tz,
            "anchor": format_iso(s.anchor),
            "start": None if s.start is None else format_iso(s.start),
            "end": None if s.end is None else format_iso(s.end),
            "catchup": self.catchup,
            "overlap": self.overlap,
            "jitter": self.jitter / SECOND,
            "paused": self.paused,
            "skip_before": None if self.skip_before is None else format_iso(self.skip_before),
            "pause_after_failures": self.pause_after,
            "created": format_iso(self.created),
            "since": format_iso(self.since),
            "task": task,
        }
        return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> Schedule:
        """Parse and check every field (spool/fields.py); CorruptFile says why it is bad."""
        try:
            return _from_doc(fields.document(data))
        except KeyError as e:
            raise CorruptFile(f"bad schedule: no {e}") from None
        except (BadInput, ValueError, TypeError, OverflowError) as e:  # a check's, or a parse's
            raise CorruptFile(f"bad schedule: {e}") from None


def _from_doc(doc: dict[str, Any]) -> Schedule:
    if doc.get("version") != VERSION:
        raise BadInput(f"unknown version {quote(repr(doc.get('version')))[:40]}")
    crons = _crons(doc.get("cron"), "cron")
    every = fields.optional(_interval, "every", doc.get("every"))
    after = fields.optional(_interval, "every_after", doc.get("every_after"))
    if sum((bool(crons), every is not None, after is not None)) != 1:
        raise BadInput("give one of cron, every and every_after")
    return Schedule(
        name=check_name(fields.text("name", doc["name"])),
        spec=_spec(doc, crons[0] if crons else None, every if every is not None else after),
        catchup=check_catchup(fields.text("catchup", doc["catchup"])),
        overlap=fields.choice("overlap", doc["overlap"], OVERLAP),
        jitter=fields.seconds("jitter", doc.get("jitter") or 0, allow_zero=True),
        task=_template(doc["task"]),
        created=fields.instant("created", doc["created"]),
        since=fields.instant("since", doc["since"]),
        paused=fields.flag("paused", doc.get("paused", False)),
        also=tuple(crons[1:]),
        except_cron=tuple(_crons(doc.get("except_cron"), "except_cron")),
        except_dates=tuple(
            check_date(fields.text("except", d)) for d in _list(doc.get("except"), "except")
        ),
        every_after=after is not None,
        pause_after=fields.optional(
            fields.whole, "pause_after_failures", doc.get("pause_after_failures"), 1, MAX_FAILURES
        ),
        skip_before=fields.optional(fields.instant, "skip_before", doc.get("skip_before")),
    )


def _spec(doc: dict[str, Any], cron: str | None, every: int | None) -> Spec:
    """When the slots fall: cron in a zone, or an interval; within LAST_SLOT."""
    start, end = (fields.optional(fields.instant, k, doc.get(k)) for k in ("start", "end"))
    for key, value in (("start", start), ("end", end)):
        if value is not None:
            check_bound(key, value)
    return Spec(
        cron=cron,
        every=every,
        tz=check_zone(fields.text("tz", doc["tz"])),
        anchor=fields.instant("anchor", doc["anchor"]),
        start=start,
        end=end,
    )


def _interval(what: str, value: object) -> int:
    """An every or every_after: a number of seconds, at least a microsecond, within a century."""
    us = fields.seconds(what, value)
    if us == 0:
        raise BadInput(f"{what} must be at least a microsecond")
    return us


def _crons(value: Any, what: str) -> list[str]:
    """A cron field: one expression, a list of them, or none."""
    items = [value] if isinstance(value, str) else _list(value, what)
    return [check_cron(fields.text(what, e)) for e in items]


def _list(value: Any, what: str, most: int = 0) -> list[Any]:
    most = most or MAX_RULES
    if value is None:
        return []
    if type(value) is not list or len(value) > most:
        raise BadInput(f"{what} must be a list of at most {most}")
    return value


def _template(value: object) -> TaskBody:
    """The task each occurrence is: a body's fields, checked as a body's (without its times)."""
    if type(value) is not dict:
        raise BadInput("task must be an object")
    task = {**value, "version": 1, "id": new_id(0), "run_at": _EPOCH, "submitted_at": _EPOCH}
    try:
        return TaskBody.from_doc(task)
    except CorruptFile as e:
        raise BadInput(f"task: {str(e).removeprefix('bad task body: ')}") from None


_EPOCH = format_iso(0)


def occurrence_key(name: str, slot: int) -> str:
    """The idempotency key of a slot's occurrence: NAME@2026-12-01T09:00:00.000000Z."""
    return f"{name}@{format_iso(slot)}"


def manual_key(name: str, slot: int) -> str:
    """The key of a manual run (`schedule run`): NAME@manual@INSTANT, never a slot's."""
    return f"{name}@manual@{format_iso(slot)}"


def backfill_key(name: str, slot: int) -> str:
    """The key of a backfill of a slot whose own occurrence was skipped: NAME@SLOT+backfill."""
    return f"{occurrence_key(name, slot)}+backfill"


@dataclass
class Cursor:
    """state.json: the cursor of materialisation (see the module docstring).

    cursor is the latest slot decided (made a task, or skipped) and
    cursor_task its task's file name as submitted; prev_task is the
    occurrence before it that was let run, which overlap looks at; held is
    a queued occurrence (its pending name, far in the future) and
    held_behind the occurrence it waits for; checked says the overlap (or
    pause) check of the cursor slot is done.

    live holds the ids of occurrences let run whose end has not been seen
    (manual and backfilled ones too): overlap looks at them, and their
    ends feed failures (failed occurrences in a row), last_end (where
    --every-after counts from), last_success and auto_paused (the `since`
    of the schedule when --pause-after-failures paused it: a resume
    changes `since`, which lifts it). missed and skipped count slots for
    the metrics: missed while every daemon was down, skipped by reason.
    """

    cursor: int
    cursor_task: str | None = None
    checked: bool = False
    prev_task: str | None = None
    held: str | None = None
    held_behind: str | None = None
    live: list[str] = field(default_factory=list)
    failures: int = 0
    last_end: int | None = None
    last_success: int | None = None
    auto_paused: int | None = None
    missed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {
            "cursor": format_iso(self.cursor),
            "cursor_task": self.cursor_task,
            "checked": self.checked,
            "prev_task": self.prev_task,
            "held": self.held,
            "held_behind": self.held_behind,
            "live": self.live,
            "failures": self.failures,
            "last_end": _iso_or_none(self.last_end),
            "last_success": _iso_or_none(self.last_success),
            "auto_paused": _iso_or_none(self.auto_paused),
            "missed": self.missed,
            "skipped": self.skipped,
        }
        return (json.dumps(doc, indent=1) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> Cursor:
        """Parse and check the cursor; CorruptFile says why it is not one."""
        try:
            doc = fields.document(data)
            return cls(
                cursor=fields.instant("cursor", doc["cursor"]),
                cursor_task=_task_name("cursor_task", doc.get("cursor_task")),
                checked=fields.flag("checked", doc.get("checked", False)),
                prev_task=_task_name("prev_task", doc.get("prev_task")),
                held=_task_name("held", doc.get("held")),
                held_behind=fields.optional(_task_id, "held_behind", doc.get("held_behind")),
                live=[_task_id("live", t) for t in _list(doc.get("live"), "live", MAX_LIVE)],
                failures=_natural(doc.get("failures", 0)),
                last_end=fields.optional(fields.instant, "last_end", doc.get("last_end")),
                last_success=fields.optional(
                    fields.instant, "last_success", doc.get("last_success")
                ),
                auto_paused=fields.optional(fields.instant, "auto_paused", doc.get("auto_paused")),
                missed=_natural(doc.get("missed", 0)),
                skipped=_tally(doc.get("skipped")),
            )
        except KeyError as e:
            raise CorruptFile(f"bad schedule state: no {e}") from None
        except (BadInput, ValueError, TypeError, OverflowError) as e:
            raise CorruptFile(f"bad schedule state: {e}") from None

    def count_skipped(self, why: str, n: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + n


def _iso_or_none(us: int | None) -> str | None:
    return None if us is None else format_iso(us)


def _natural(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
        raise ValueError(f"{value!r} is no count")
    return value


def _tally(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not set(value) <= set(SKIP_REASONS):
        raise ValueError(f"skipped must map {', '.join(SKIP_REASONS)} to counts")
    return {str(k): _natural(v) for k, v in value.items()}


def _task_name(what: str, value: object) -> str | None:
    """A task's file name as the state records it, or None."""
    if value is None:
        return None
    TaskName.parse(fields.text(what, value))  # ValueError if it names no task
    return str(value)


def _task_id(what: str, value: object) -> str:
    return check_id(fields.text(what, value))


class Store:
    """The schedules of one spool: SPOOL/schedules/NAME/."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.root = spool.schedules

    def dir(self, name: str) -> str:
        return self.spool.schedule_dir(check_name(name))

    def schedule_file(self, name: str) -> str:
        return f"{self.dir(name)}/{SCHEDULE_FILE}"

    def names(self) -> list[str]:
        """Every schedule with a schedule.json, sorted; other names are ignored."""
        out = []
        for entry in fsutil.listdir(self.root):
            if _NAME.fullmatch(entry) and os.path.lexists(self.schedule_file(entry)):
                out.append(entry)
        return sorted(out)

    def read(self, name: str) -> Schedule:
        """Read a schedule; NotFound if there is none, CorruptFile if it is bad."""
        path = self.schedule_file(name)
        try:
            data = fsutil.read_spool_file(path, MAX_FILE)
        except FileNotFoundError:
            raise NotFound(f"no schedule {name} in {self.spool.root}") from None
        sched = Schedule.from_json(data)
        if sched.name != name:  # its state and journal are its directory's
            raise CorruptFile(f"bad schedule: named {sched.name}, in the directory of {name}")
        return sched

    def create(self, sched: Schedule, replace_it: bool) -> bool:
        """Write a new schedule; refuse an existing name unless replace_it. True if replaced."""
        d = self.dir(sched.name)
        fsutil.ensure_dir(self.root)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass  # replaced below, or an add cut short before its file was written
        replaced = os.path.exists(self.schedule_file(sched.name))
        if replaced and not replace_it:
            raise Conflict(f"schedule {sched.name} exists; give --replace to replace it")
        self.write(sched)
        fsutil.fsync_dir(self.root)
        return replaced

    def write(self, sched: Schedule) -> None:
        _replace_file(self.schedule_file(sched.name), sched.to_json())

    def state(self, name: str, since: int) -> Cursor:
        """The cursor; if state.json is gone or unreadable, the journal's (recovered)."""
        try:
            return Cursor.from_json(fsutil.read_spool_file(self._state(name), MAX_FILE))
        except (OSError, CorruptFile):
            return Cursor(cursor=max(since - 1, self.last_decided(name)))

    def last_decided(self, name: str) -> int:
        """The latest slot the journal says this schedule decided (made or skipped); 0 if none.

        state.json may be removed (taskq-spool(5)), and the keys that would
        stop a slot from being made twice are freed by retention once its
        task is pruned: without this, a catch-up from `since` ran again every
        slot whose key was gone. Only records since the schedule was added
        (or replaced) count; the journal is never pruned with the tasks.
        """
        latest = 0
        for r in self.history(name):
            if r.get("event") in (Event.ADDED, Event.REPLACED):
                latest = 0
            for key in ("slot", "before") if r.get("event") in DECIDED else ():
                with contextlib.suppress(TypeError, TaskqError):
                    latest = max(latest, fields.instant(key, r[key]) if key in r else 0)
        return latest

    def save_state(self, name: str, state: Cursor, base: Cursor | None = None) -> None:
        """Write the state; with base (what this pass read), keep live ids added since."""
        if base is not None:
            now_on_disk = self.state(name, state.cursor + 1)
            known = set(base.live) | set(state.live)
            state.live.extend(t for t in now_on_disk.live if t not in known)
        _replace_file(self._state(name), state.to_json())

    def add_live(self, name: str, since: int, task_id: str) -> None:
        """Add an occurrence made by hand to the state's live ids (for overlap and failures)."""
        state = self.state(name, since)
        if task_id not in state.live and len(state.live) < MAX_LIVE:
            state.live.append(task_id)
            self.save_state(name, state)

    def reset_state(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._state(name))

    def _state(self, name: str) -> str:
        return f"{self.dir(name)}/{CURSOR_FILE}"

    def log(self, name: str, event: Event, now: int, **fields: Any) -> None:
        journal.append(self.dir(name), event, now, **fields)

    def history(self, name: str) -> list[dict[str, Any]]:
        return journal.read(self.dir(name))

    def remove(self, name: str) -> None:
        """Delete a schedule's directory: out of sight by one rename, then removed."""
        d = self.dir(name)
        gone = os.path.join(self.root, f".removed.{name}.{os.getpid()}")
        try:
            os.rename(d, gone)
        except FileNotFoundError:
            raise NotFound(f"no schedule {name} in {self.spool.root}") from None
        fsutil.fsync_dir(self.root)
        shutil.rmtree(gone, ignore_errors=True)

    def with_paused(self, name: str, paused: bool, now: int) -> Schedule:
        """Pause, or resume from now on: a resume also ends a skip and a pause by failures."""
        sched = self.read(name)
        if paused:
            changed = replace(sched, paused=True)
        else:
            changed = replace(sched, paused=False, since=now, skip_before=None)
        self.write(changed)
        return changed

    def with_skip(self, name: str, before: int) -> Schedule:
        """Skip the slots before `before` (`schedule skip`)."""
        changed = replace(self.read(name), skip_before=before)
        self.write(changed)
        return changed


def _replace_file(path: str, data: bytes) -> None:
    """Write a whole file by write-fsync-rename over the old one, durably."""
    fsutil.replace_file(path, data)
    fsutil.fsync_dir(os.path.dirname(path))
