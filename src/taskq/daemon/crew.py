"""What the daemon's claim-handling parts share: spool, identity, clock, lease, commit, guards.

The dispatcher, recovery and the starter each act on claims in the spool
under this daemon's name and lease, report the directories they touch to
one group commit and hand outcomes to one settler. They get these as one
Crew, and as a Part they hold them as attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.daemon.commit import GroupCommit
from taskq.daemon.poison import PoisonGuard
from taskq.daemon.settle import Settler
from taskq.spool.layout import Spool
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock


@dataclass(frozen=True)
class Crew:
    """The tools every claim-handling part of one daemon shares."""

    spool: Spool
    daemon: DaemonId  # this daemon, as its claims name it
    clock: Clock
    lease: int  # µs
    commit: GroupCommit
    settler: Settler
    poison: PoisonGuard  # the guard over the handling of each file


class Part:
    """A part of the daemon that handles claims with the crew's tools."""

    def __init__(self, crew: Crew) -> None:
        self.spool, self.daemon, self.clock = crew.spool, crew.daemon, crew.clock
        self.lease, self.commit, self.settler = crew.lease, crew.commit, crew.settler
        self.poison = crew.poison

    def expiry(self, now: int) -> int:
        """A lease's expiry if taken now, in the reference clock (steps do not shorten it)."""
        return self.clock.reference(now) + self.lease
