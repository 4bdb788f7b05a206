"""Paused queues: one file per queue in paused/, honoured by every daemon.

`taskq pause QUEUE [--until WHEN]` writes paused/QUEUE (a small JSON
object: until, paused_at, by_uid), replacing any earlier pause of that
queue, syncs it and rings the doorbell; `taskq resume QUEUE` removes it.
Daemons read paused/ at every rescan (every ring of the doorbell, and
every --rescan), so a pause made on another host is heard through the
doorbell poll. A paused queue's tasks stay in pending/ and in the due
index, but the dispatcher does not hand them out until the pause ends
(resume, or its until passes); then they drain through the usual round
robin. A file that is not a pause is quarantined and does not pause.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from taskq.errors import Conflict, CorruptFile, TaskqError
from taskq.spool import fields, fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import check_queue
from taskq.times.timespec import format_iso


@dataclass(frozen=True)
class Pause:
    """One queue's pause: until when (None: until resumed)."""

    queue: str
    until: int | None
    paused_at: int

    def holds(self, now: int) -> bool:
        return self.until is None or now < self.until

    def to_doc(self) -> dict[str, object]:
        until = None if self.until is None else format_iso(self.until)
        return {"queue": self.queue, "until": until, "paused_at": format_iso(self.paused_at)}


def pause(spool: Spool, queues: list[str], until: int | None, now: int) -> list[Pause]:
    """Pause queues (durably, for every daemon); a second pause replaces the first."""
    done = []
    fsutil.ensure_dir(spool.paused)
    for queue in queues:
        held = Pause(check_queue(queue), until, now)
        doc = {**held.to_doc(), "by_uid": os.getuid()}
        staging = os.path.join(spool.tmp, f".pause-{held.queue}-{os.getpid()}")
        data = (json.dumps(doc) + "\n").encode()
        fsutil.replace_file(spool.pause_path(held.queue), data, staging=staging)
        done.append(held)
    fsutil.fsync_dir(spool.paused)
    spool.ring()
    return done


def resume(spool: Spool, queues: list[str]) -> None:
    """Resume paused queues, all before the doorbell rings; Conflict if one is not paused."""
    for queue in queues:
        if not os.path.exists(spool.pause_path(check_queue(queue))):
            raise Conflict(f"queue {queue} is not paused")
    for queue in queues:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spool.pause_path(queue))
    fsutil.fsync_dir(spool.paused)
    spool.ring()


def read(path: str) -> Pause:
    """Parse one pause file; CorruptFile says why it is not one."""
    data = fsutil.read_spool_file(path, 4096)
    try:
        doc = fields.document(data)
        until = doc["until"]
        return Pause(
            check_queue(os.path.basename(path)),
            None if until is None else fields.instant("until", until),
            fields.instant("paused_at", doc["paused_at"]),
        )
    except KeyError as e:
        raise CorruptFile(f"not a pause file: no {e}") from None
    except TaskqError as e:
        raise CorruptFile(f"not a pause file: {e}") from None


def read_all(spool: Spool) -> tuple[list[Pause], list[tuple[str, str]]]:
    """Every pause in paused/, and (path, reason) of files that are not pauses."""
    pauses, bad = [], []
    for entry in fsutil.listdir(spool.paused):
        if entry.startswith("."):
            continue
        path = os.path.join(spool.paused, entry)
        try:
            pauses.append(read(path))
        except CorruptFile as e:
            bad.append((path, str(e)))
        except FileNotFoundError:
            continue  # resumed meanwhile
    return pauses, bad


def active(spool: Spool, now: int) -> list[Pause]:
    """The pauses that hold now (for stats and status)."""
    return [p for p in read_all(spool)[0] if p.holds(now)]


class Pauses:
    """The daemon's view of paused/, reloaded at each rescan."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._pauses: dict[str, Pause] = {}

    def reload(self) -> list[tuple[str, str]]:
        """Read paused/ again; return (path, reason) of files to quarantine."""
        pauses, bad = read_all(self.spool)
        self._pauses = {p.queue: p for p in pauses}
        return bad

    def held(self, now: int) -> frozenset[str]:
        """The queues paused at this instant."""
        return frozenset(q for q, p in self._pauses.items() if p.holds(now))

    def next_end(self, now: int) -> int | None:
        """The earliest instant a pause that holds now will lapse by itself."""
        ends = [p.until for p in self._pauses.values() if p.until is not None and p.until > now]
        return min(ends, default=None)
