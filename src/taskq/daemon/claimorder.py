"""The order one daemon tries due tasks in, so that daemons sharing a spool try different ones.

Each due task has one first taker among the spool's live, dispatching
daemons (its peers, from the health records in run/): the daemon whose
share of the peers' workers holds crc32(id) mod their sum. Every daemon
computes the same first taker from the same records, without talking to the
others. A daemon tries its own tasks first, oldest first, as a lone daemon
tries all of them; another's task it tries once that daemon has had its
chance (STEAL_AFTER past the run time) and, among those, in an order of its
own (a hash of its name and the task's id, within each STEAL_QUANTUM of
eligibility), so thieves and the first taker rarely reach for the same file.
When another's task is more than SPREAD older than its own oldest, it goes
first: the cluster still starts the oldest due work first, to within
SPREAD. A stale or missing record costs lost claims, never a task: every
claim is still one compare-and-swap rename.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from taskq.spool import rundir
from taskq.times.timespec import MS, SECOND

STEAL_AFTER = 250 * MS  # how long a task's first taker has before the others try it
STEAL_QUANTUM = 100 * MS  # run times this close are one tier for thieves, in hash order
SPREAD = SECOND  # another's task older than our oldest by this much goes first
PEERS_EVERY = 2 * SECOND  # re-read run/'s records at most this often (monotonic)


class Peer(NamedTuple):
    daemon: str  # HOST_PID, as claims and run/ name a daemon
    workers: int


class ClaimOrder:
    """Who takes each due task first, and when and in which order the others may try it."""

    def __init__(self, me: str, workers: int) -> None:
        self.me = Peer(me, workers)
        self._seed = zlib.crc32(me.encode())
        self._bounds: list[int] = [workers]  # cumulative workers, peers sorted by daemon
        self._mine = (0, workers)  # our share of [0, total)
        self.peers: tuple[Peer, ...] = (self.me,)
        self._next_read = 0

    def refresh(self, run_dir: str, host: str, now: int, mono: int) -> bool:
        """Re-read the peers if it is time; True if they changed (the index must re-sort)."""
        if mono < self._next_read:
            return False
        self._next_read = mono + PEERS_EVERY
        return self.set_peers(live_peers(run_dir, host, now))

    def set_peers(self, peers: Iterable[Peer]) -> bool:
        """Use these peers (ourselves added if missing); True if they changed."""
        found = {p.daemon: p for p in peers if p.workers > 0}
        found[self.me.daemon] = self.me
        ordered = tuple(found[o] for o in sorted(found))
        if ordered == self.peers:
            return False
        self.peers = ordered
        total, self._bounds = 0, []
        for peer in ordered:
            if peer.daemon == self.me.daemon:
                self._mine = (total, total + peer.workers)
            total += peer.workers
            self._bounds.append(total)
        return True

    def mine(self, task_id: str) -> bool:
        """Whether we are this task's first taker."""
        slot = zlib.crc32(task_id.encode()) % self._bounds[-1]
        return self._mine[0] <= slot < self._mine[1]

    def first_taker(self, task_id: str) -> str:
        """The daemon name of this task's first taker."""
        slot = zlib.crc32(task_id.encode()) % self._bounds[-1]
        return self.peers[bisect.bisect_right(self._bounds, slot)].daemon

    def steal_key(self, run_at: int, task_id: str) -> tuple[int, int]:
        """(when we may try another's task, our tie-break among tasks then eligible)."""
        eligible = -(-(run_at + STEAL_AFTER) // STEAL_QUANTUM) * STEAL_QUANTUM
        return eligible, zlib.crc32(task_id.encode(), self._seed)

    @staticmethod
    def older_first(mine_run_at: int, theirs_run_at: int) -> bool:
        """Whether another's eligible task should go before our own due one."""
        return theirs_run_at + SPREAD < mine_run_at


def live_peers(run_dir: str, host: str, now: int) -> list[Peer]:
    """The daemons whose health records say they live and dispatch, with their workers."""
    return [
        Peer(str(r["owner"]), r["workers"])
        for r in rundir.read_all(run_dir)
        if _usable(r) and r.get("dispatching") and rundir.record_alive(run_dir, r, host, now)
    ]


def _usable(record: dict[str, Any]) -> bool:
    workers = record.get("workers")
    return isinstance(record.get("owner"), str) and type(workers) is int and workers > 0
