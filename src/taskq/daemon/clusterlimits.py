"""Limits that hold across every daemon of a spool: queue limits, mutexes and rates.

Each limit is a set of permits in SPOOL/permits/ (spool/permits.py), taken
by the same kind of compare-and-swap rename as a task's claim, so that it
holds across hosts with no lock server. A daemon takes an attempt's permits
after claiming and reading its task, before marking it started; what cannot
get its permits goes back to pending. A queue or mutex permit is leased like
the claim (same expiry, renewed with it) and given back when the attempt
ends; a daemon that dies holding one loses it with its lease. A rate permit
is held for the period after the start it allowed, then reclaimed by
whoever finds it expired.

Tasks waiting for a busy mutex leave a ticket, and a mutex is taken only
for the oldest waiting task, so that waiters start in run time order. This
part keeps in memory which permits this daemon holds and which tasks it saw
waiting; the spool holds the truth.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable

from taskq.daemon.crew import Crew, Part
from taskq.spool import fsutil, permits, rundir
from taskq.spool.permits import Lease, Listing, Permit, Ticket
from taskq.spool.task import ClaimName, TaskBody, TaskName

log = logging.getLogger("taskq")
Held = tuple[Permit, Lease]
STALE_TICKET = 2.0  # seconds between two looks that both find a ticket's task out of play
_clock = time.monotonic  # (the tests' to set)


class ClusterLimits(Part):
    """This daemon's side of the cluster-wide limits."""

    def __init__(
        self,
        crew: Crew,
        limits: dict[str, int],
        rates: dict[str, tuple[int, int]],
        quarantine: Callable[[str, str], None],
    ) -> None:
        super().__init__(crew)
        self.limits = limits  # queue -> attempts at once, cluster-wide
        self.rates = rates  # queue -> (starts, per period in µs)
        self.quarantine = quarantine
        self.held: dict[str, list[Held]] = {}  # by task id: queue and mutex permits
        self.rated: dict[str, tuple[Held, int]] = {}  # by task id: a rate permit, its period
        self.waiting: dict[str, str] = {}  # task id -> the mutex it waits for
        self.suspects: dict[Ticket, float] = {}  # a free mutex's first ticket out of play: since
        self.view = Listing(frozenset(), (), ())
        self._offset = zlib.crc32(f"{self.daemon.host}_{self.daemon.pid}".encode())

    # -- what may be tried -----------------------------------------------

    def look(self, now: int) -> None:
        """List permits/ again (once per dispatch turn, when any limit is in play)."""
        if not (self.limits or self.rates or self.waiting or self.held):
            return
        self.view = permits.listing(self.spool)
        for entry in self.view.bad:
            self.quarantine(self.spool.permit_path(entry), "not a permit or ticket name")
        self._drop_stale_tickets()

    def open(self, queue: str) -> bool:
        """Whether the queue's cluster-wide permits, as last listed, leave room for a start."""
        limit = self.limits.get(queue)
        if limit is not None and self.view.in_use("queue", queue) >= limit:
            return False
        rate = self.rates.get(queue)
        return (
            rate is None or self.view.in_use("rate", queue) < rate[0] or self._expired_rate(queue)
        )

    def may_try(self, name: TaskName) -> bool:
        """Whether to claim a task: not one seen waiting for a mutex that is still busy."""
        mutex = self.waiting.get(name.id)
        if mutex is None:
            return True
        if Permit("mutex", mutex, 0) in self.view.held:
            return False
        oldest = self.view.oldest_waiting(mutex)
        return oldest is None or oldest.id == name.id

    # -- taking and giving back ------------------------------------------

    def acquire(self, held: ClaimName, body: TaskBody, now: int) -> str | None:
        """Take the permits a claimed attempt needs; None, or why it must wait."""
        if body.mutex is None and body.queue not in self.limits and body.queue not in self.rates:
            self.waiting.pop(body.id, None)
            return None  # (most tasks: no permit to take, no lease to make)
        lease = permits.lease_for(body.id, self.expiry(now), self.daemon.pid, self.daemon.host)
        got: list[Held] = []
        why = None
        if body.queue in self.limits:
            why = self._take_one("queue", body.queue, self.limits[body.queue], lease, got)
        if why is None and body.mutex is not None:
            why = self._take_mutex(held.task, body.mutex, lease, got)
        if why is None and body.queue in self.rates:
            count, period = self.rates[body.queue]
            rate_lease = lease._replace(expiry=self.clock.reference(now) + period)
            rated: list[Held] = []
            why = self._take_one("rate", body.queue, count, rate_lease, rated)
            if rated:
                self.rated[body.id] = (rated[0], period)
        if why is not None:
            for permit, mine in got:
                permits.give_back(self.spool, permit, mine)
            self.view = permits.listing(self.spool)
            return why
        if got:
            self.held[body.id] = got
        self.waiting.pop(body.id, None)
        return None

    def _take_one(
        self, kind: str, name: str, count: int, lease: Lease, got: list[Held]
    ) -> str | None:
        for i in range(count):
            permit = Permit(kind, name, (self._offset + i) % count)
            if permit in self.view.held and not self._free_if_expired(permit):
                continue
            if permits.take(self.spool, permit, lease):
                got.append((permit, lease))
                return None
        what = "starts per period" if kind == "rate" else "attempts at once"
        return f"queue {name} is at its limit of {count} {what} across the spool"

    def _take_mutex(self, task: TaskName, mutex: str, lease: Lease, got: list[Held]) -> str | None:
        """Take the mutex if it is free and no older task waits for it; else leave a ticket.

        Listed afresh: a turn's view may predate a ticket, or be none (a daemon
        with no limit in play skips its look), and let a later waiter go first."""
        self.view = permits.listing(self.spool)
        oldest = self.view.oldest_waiting(mutex)
        permit = Permit("mutex", mutex, 0)
        first = oldest is None or (oldest.run_at, oldest.id) >= (task.run_at, task.id)
        free = permit not in self.view.held or self._free_if_expired(permit)
        if first and free and permits.take(self.spool, permit, lease):
            got.append((permit, lease))
            permits.unwait(self.spool, Ticket(mutex, task))
            return None
        permits.wait(self.spool, Ticket(mutex, task))
        self.waiting[task.id] = mutex
        return f"waits for mutex {mutex}"

    def started(self, task_ids: Iterable[str], now: int) -> None:
        """Attempts started now: their rate permits run for a period from now, not from the take."""
        for task_id in task_ids:
            found = self.rated.pop(task_id, None)
            if found is None:
                continue
            (permit, lease), period = found
            later = lease._replace(expiry=self.clock.reference(now) + period)
            try:
                permits.renew(self.spool, permit, lease, later)
            except FileNotFoundError:
                pass  # reclaimed already: the clock says its period passed

    def release(self, task_id: str) -> None:
        """Give back the queue and mutex permits held for an attempt that ended."""
        gave = False
        for permit, lease in self.held.pop(task_id, []):
            gave = permits.give_back(self.spool, permit, lease) or gave
        if gave:
            self.spool.ring()  # waiters on other hosts hear of it at their next poll

    def sweep(self, live: Iterable[str]) -> None:
        """Give back what is held for attempts no longer running or prepared here."""
        live = set(live)
        for task_id in set(self.held) - live:
            self.release(task_id)
        for task_id in set(self.rated) - live:
            del self.rated[task_id]  # never started: its permit runs out from its take

    # -- leases ----------------------------------------------------------

    def renew(self, now: int) -> list[str]:
        """Extend the leases of our permits; the ids of attempts whose permit was taken from us."""
        lost = []
        expiry = self.expiry(now)
        for task_id, held in self.held.items():
            for i, (permit, lease) in enumerate(held):
                new = lease._replace(expiry=expiry)
                try:
                    permits.renew(self.spool, permit, lease, new)
                    held[i] = (permit, new)
                except FileNotFoundError:
                    lost.append(task_id)
        for task_id in lost:
            self.held.pop(task_id, None)
        return lost

    def taken_over(self, task_id: str, now: int) -> None:
        """We took over an attempt's claim: take over the permits its old daemon held for it."""
        mine = permits.lease_for(task_id, self.expiry(now), self.daemon.pid, self.daemon.host)
        for permit in permits.listing(self.spool).held:
            lease = self._lease(permit)
            if lease is None or lease.task_id != task_id or permit.kind == "rate":
                continue
            try:
                permits.renew(self.spool, permit, lease, mine)
            except FileNotFoundError:
                continue
            self.held.setdefault(task_id, []).append((permit, mine))

    def reclaim(self, now: int, trusted: bool) -> None:
        """Free the permits whose lease expired, or whose daemon died on this host."""
        for permit in permits.listing(self.spool).held:
            lease = self._lease(permit)
            if lease is None:
                permits.drop_empty(self.spool, permit)
                continue
            mine = lease.daemon == f"{self.daemon.host}_{self.daemon.pid}"
            abandoned = not mine and self._abandoned(lease, now, trusted)
            if abandoned and permits.give_back(self.spool, permit, lease):
                log.info("freed permit %s of %s: its lease ended", permit, lease.daemon)
                self.spool.ring()

    def _abandoned(self, lease: Lease, now: int, trusted: bool) -> bool:
        if lease.host == self.daemon.host and not rundir.daemon_alive(self.spool.run, lease.daemon):
            return True
        return trusted and self.clock.may_start(lease.expiry, now)

    def _free_if_expired(self, permit: Permit) -> bool:
        """Reclaim one held permit on the spot if its lease has surely expired."""
        lease = self._lease(permit)
        now = self.clock.now()
        if lease is None or not self.clock.may_start(lease.expiry, now):
            return lease is None
        return permits.give_back(self.spool, permit, lease)

    def _expired_rate(self, queue: str) -> bool:
        count = self.rates[queue][0]
        return any(self._free_if_expired(Permit("rate", queue, i)) for i in range(count))

    def _lease(self, permit: Permit) -> Lease | None:
        try:
            return permits.lease_of(self.spool, permit)
        except ValueError as e:
            self.quarantine(self.spool.permit_path(str(permit)), str(e))
            return None

    def _drop_stale_tickets(self) -> None:
        """Remove a free mutex's oldest ticket when two looks found its task out of play.

        (A claimed one is being tried by some daemon right now: it keeps its place.)
        A look is two: claimed/, then the pending name, and a task that moves
        between them (claimed, or released and claimed again) is in neither.
        A ticket is only suspected then, and removed once a look STALE_TICKET
        seconds or more later still finds its task out of play: a ticket is
        never taken away, even for an instant, from a task that was moving,
        so no other daemon lists the mutex without it and lets a later
        waiter go first.
        """
        now = _clock()
        suspects: dict[Ticket, float] = {}
        seen: set[str] = set()
        for ticket in self.view.tickets:
            if ticket.mutex in seen or Permit("mutex", ticket.mutex, 0) in self.view.held:
                continue
            seen.add(ticket.mutex)
            if self._in_play(ticket.task):
                continue
            since = self.suspects.get(ticket, now)
            if now - since < STALE_TICKET:
                suspects[ticket] = since
                continue
            permits.unwait(self.spool, ticket)
            self.view = self.view._replace(
                tickets=tuple(t for t in self.view.tickets if t != ticket)
            )
            seen.discard(ticket.mutex)  # its next ticket is judged in this look
        self.suspects = suspects

    def _in_play(self, task: TaskName) -> bool:
        """Whether the task is claimed, or pending under this name (claimed/ looked at first)."""
        prefix = f"{task}_"
        if any(e.startswith(prefix) for e in fsutil.listdir(self.spool.claimed)):
            return True
        return os.path.lexists(f"{self.spool.bucket_dir(task.bucket)}/{task}")
