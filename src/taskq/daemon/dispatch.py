"""Finding due work and claiming it: the due index, claims, and preparing a start.

The dispatcher hands out at most as many due tasks as there are free
workers, fairly across queues (the due index's round robin), in the claim
order that spreads daemons sharing a spool over different tasks
(claimorder.py), and no earlier than the clock's uncertainty allows. It
counts the claims it wins and loses (a lost one found its task gone:
another daemon or a cancel was first). Each task is claimed under a lease,
its body read and checked (parse, owner, expiry) and its claim renamed to
started: the start is then durable at the next group commit, before the
attempt exists. What cannot be run is quarantined with a reason.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterable

from taskq.daemon.attempts import Prepared
from taskq.daemon.claimorder import ClaimOrder
from taskq.daemon.clusterlimits import ClusterLimits
from taskq.daemon.crew import Crew, Part
from taskq.daemon.dueindex import DueIndex
from taskq.daemon.loadgate import LoadGate
from taskq.daemon.policy import expired
from taskq.errors import CorruptFile
from taskq.spool import journal, transitions
from taskq.spool import runas as security
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.pause import Pauses
from taskq.spool.states import State
from taskq.spool.task import ClaimName, TaskBody, TaskName
from taskq.times.timespec import format_iso

_LOST = object()  # a claim that found its task gone


class QueueCaps:
    """Per-queue concurrency caps (--queue-limit), paused queues and the load gate, now."""

    def __init__(
        self,
        limits: dict[str, int],
        default: int,
        busy: Iterable[str],
        paused: frozenset[str] = frozenset(),
        cluster: Callable[[str], bool] = lambda queue: True,
        gate: LoadGate | None = None,
    ) -> None:
        self.limits = limits
        self.default = default
        self.busy = collections.Counter(busy)
        self.paused = paused
        self.cluster = cluster  # the cluster-wide permits leave room (clusterlimits.py)
        self.gate = gate

    def open(self, queue: str) -> bool:
        if queue in self.paused or not self.cluster(queue):
            return False
        if self.limits and self.busy[queue] >= self.limits.get(queue, self.default):
            return False
        return self.gate is None or self.gate.open(queue)

    def took(self, queue: str) -> None:
        """One more of queue's tasks is claimed to start."""
        self.busy[queue] += 1
        if self.gate is not None:
            self.gate.took(queue)


class Dispatcher(Part):
    """The due index and the claim-and-prepare step of the loop."""

    def __init__(
        self,
        crew: Crew,
        user_rules: security.UserRules,
        workers: int,
        on_claim: Callable[[bool], None] = lambda won: None,
        limits: ClusterLimits | None = None,
    ) -> None:
        super().__init__(crew)
        self.user_rules = user_rules
        self.limits = limits or ClusterLimits(crew, {}, {}, lambda path, why: None)
        self.order = ClaimOrder(f"{self.daemon.host}_{self.daemon.pid}", workers)
        self.index = DueIndex(self.spool, self.order)
        self.pauses = Pauses(self.spool)
        self._deadlines: dict[str, int | None] = {}  # expiry of paused due tasks, by id
        self.won = self.lost = 0
        self._on_claim = on_claim

    def counted(self, won: bool) -> None:
        """One claim attempt's outcome: won, or lost to whoever moved the task first."""
        if won:
            self.won += 1
        else:
            self.lost += 1
        self._on_claim(won)

    def rescan(self, now: int) -> None:
        """Rebuild the due index and the pauses from the spool; quarantine what is bad."""
        self.order.refresh(self.spool.run, self.daemon.host, now, self.clock.mono())
        for path, reason in [*self.index.rescan(now), *self.pauses.reload()]:
            self.settler.quarantine(path, reason, now)
        self.expire_paused(now)

    def expire_paused(self, now: int) -> None:
        """Fail the due tasks of paused queues whose --expires deadline has passed.

        A paused task is not claimed, so its deadline is checked here, at each
        rescan; each body is read once (its deadline is then remembered).
        """
        held = self.pauses.held(now)
        if not held:
            self._deadlines.clear()
            return
        for name, path in self.index.due_in(held, now):
            if name.id not in self._deadlines:
                self._deadlines[name.id] = self._deadline(path, name)
            deadline = self._deadlines[name.id]
            if deadline is None or now <= deadline:
                continue
            self.index.discard(name)
            with self.poison.handling("task", name.id, path, "expire"):
                self._expire(name, path, deadline, now)

    def _expire(self, name: TaskName, path: str, deadline: int, now: int) -> None:
        try:
            held = transitions.claim(
                self.spool, path, name, self.daemon, self.expiry(now), self.commit.touched
            )
        except FileNotFoundError:
            self.counted(False)
            return
        self.counted(True)
        expired_at = format_iso(deadline)
        self.settler.finish(held, State.FAILED, now, event=Event.EXPIRED, deadline=expired_at)

    def _deadline(self, path: str, name: TaskName) -> int | None:
        try:
            body = self.spool.read_body(path)
        except (CorruptFile, OSError):
            return None  # claimed meanwhile, or bad: the claim path judges it
        if body.expires is None:
            return None
        scheduled = journal.scheduled_for(
            self.spool.log_dir(body.id), name.attempt, name.run_at, body.run_at
        )
        return scheduled + body.expires

    def claim_due(self, now: int, free: int, caps: QueueCaps) -> list[Prepared]:
        """Claim up to `free` tasks due by now + the commit lead, and prepare each."""
        horizon = now + self.commit.lead()
        expiry = self.expiry(now)
        prepared: list[Prepared] = []
        if self.order.refresh(self.spool.run, self.daemon.host, now, self.clock.mono()):
            self.index.resort()  # peers came or went: who takes what first changed

        def due(run_at: int) -> bool:
            return self.clock.earliest_start(run_at) <= horizon

        relisted = False
        self.limits.look(now)
        waiting: list[TaskName] = []
        while len(prepared) < free:
            picked = self.index.pop_due(due, caps.open)
            if picked is None:
                break
            name, path = picked
            if not self.limits.may_try(name):
                waiting.append(name)  # its mutex is busy: not worth a claim
                continue
            held = self._claim(path, name, expiry, now)
            if held is _LOST and not self.order.mine(name.id):
                # Another's task, taken already: what we know of the others' tasks
                # is stale. One fresh listing instead of a lost rename for each.
                if relisted:
                    break
                self.rescan(now)
                relisted = True
            if not isinstance(held, ClaimName):
                continue
            ready = self.prepare(held, now)
            if ready is not None:
                prepared.append(ready)
                caps.took(ready.body.queue)
        for name in waiting:
            self.index.push(name)
        return prepared

    def _claim(self, path: str, name: TaskName, expiry: int, now: int) -> ClaimName | object:
        """Claim one due task: its claim, _LOST (it was gone), or None (quarantined)."""
        try:
            held = transitions.claim(
                self.spool, path, name, self.daemon, expiry, self.commit.touched
            )
            crash_point("daemon.claimed")
        except FileNotFoundError:
            self.counted(False)
            return _LOST  # cancelled, or claimed by another daemon: theirs now
        except CorruptFile as e:  # its bucket became a link since the rescan
            self.settler.quarantine(os.path.dirname(path), str(e), now)
            return None
        self.counted(True)
        return held

    def prepare(self, held: ClaimName, now: int) -> Prepared | None:
        """Read a fresh claim's body, expire it or mark it started.

        Reading and judging the body is the poison guard's handling of the
        file; the start rename after it acts on the name alone.
        """
        path = self.spool.claim_path(held)
        read = None
        with self.poison.handling("task", held.task.id, path, "prepare"):
            read = self._runnable(held, path, now)
        if read is None:
            return None
        body, user = read
        try:
            held = transitions.start(self.spool, held, self.commit.touched)
        except FileNotFoundError:
            self.limits.release(body.id)
            return None  # cancelled between claim and start: it must not run
        crash_point("daemon.started")
        return Prepared(held, body, user, self.clock.mono())

    def _runnable(
        self, held: ClaimName, path: str, now: int
    ) -> tuple[TaskBody, security.RunAs] | None:
        """The body of a fresh claim and whom it runs as; None if it was refused or expired."""
        read = self._read(path, now)
        if read is None:
            return None
        crash_point("daemon.read")
        body = read[0]
        if body.id != held.task.id:
            reason = f"body id {body.id} does not match the file name"
            self.settler.quarantine(path, reason, now)
            return None
        log_dir = self.spool.log_dir(body.id)
        scheduled = journal.scheduled_for(log_dir, held.task.attempt, held.task.run_at, body.run_at)
        deadline = expired(now, scheduled, body.expires)
        if deadline is not None:
            expired_at = format_iso(deadline)
            self.settler.finish(
                held, State.FAILED, now, body, event=Event.EXPIRED, deadline=expired_at
            )
            return None
        why = self.limits.acquire(held, body, now)
        if why is not None:
            self.settler.release(held, now, why)
            return None
        return read

    def _read(self, path: str, now: int) -> tuple[TaskBody, security.RunAs] | None:
        try:
            body, owner = self.spool.read_task(path)
            return body, security.run_as(owner, self.user_rules)
        except CorruptFile as e:
            self.settler.quarantine(path, str(e), now)
        except ValueError as e:  # an owner who may not run tasks here: never run it
            self.settler.quarantine(path, str(e), now)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.settler.quarantine(path, self._unreadable(path, e), now)
        return None

    def _unreadable(self, path: str, e: OSError) -> str:
        """Why a task file cannot be read: most often, it is not ours to read."""
        try:
            security.run_as(os.lstat(path).st_uid, self.user_rules)
        except ValueError as refusal:
            return str(refusal)
        except OSError:
            pass
        return f"unreadable: {e.strerror}"
