"""What follows a task's end, off the loop: telling people, releasing its dependents.

The settler reports each end it makes (done, failed, cancelled) here; the
loop calls committed() after its group commit, and only then are the ends
handed to the teller (hook and mail) and, for tasks that something waits
for, to the resolver. So nothing is told or released about an end that a
crash could still undo, and the loop never waits for either thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from taskq.daemon.resolver import Resolver
from taskq.notify.event import Ended
from taskq.notify.teller import Teller
from taskq.spool.config import Notify
from taskq.spool.layout import Handling, Spool, unguarded

STOP_WAIT = 5.0  # seconds a stopping daemon waits for ends still to be told


class Aftermath:
    """The teller and resolver threads, fed with the ends of each iteration."""

    def __init__(
        self,
        spool: Spool,
        notify: Notify | None,
        wall: Callable[[], int],
        every: int,
        handling: Handling = unguarded,
    ) -> None:
        self.teller = Teller(spool, notify, wall)
        self.resolver = Resolver(spool, wall, every, self.teller.tell, handling)
        self._ended: list[tuple[Ended, bool]] = []

    def start(self) -> None:
        self.teller.start()
        self.resolver.start()

    def stop(self, wait: float = STOP_WAIT) -> None:
        """Ask both threads to finish what they were handed; wait a little for them."""
        self.resolver.stop()
        self.teller.stop()
        deadline = time.monotonic() + wait
        for thread in (self.resolver.thread, self.teller.thread):
            thread.join(max(0.0, deadline - time.monotonic()))

    def ended(self, ended: Ended, waited_for: bool) -> None:
        """A task ended this iteration (not yet durable); waited_for: it has dependents."""
        self._ended.append((ended, waited_for))

    def committed(self) -> None:
        """The iteration's ends are durable: tell them, and resolve their dependents."""
        for ended, waited_for in self._ended:
            self.teller.tell(ended)
            if waited_for:
                self.resolver.ended(ended.name.id)
        self._ended.clear()
