"""The daemon's parts started before the loop's first turn and stopped after its last, in order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from taskq.daemon import runner
from taskq.daemon.wiring import Parts
from taskq.spool.layout import Spool
from taskq.times.clock import Clock


@contextlib.contextmanager
def running(spool: Spool, parts: Parts, clock: Clock) -> Iterator[None]:
    """Lock the spool and start the parts' threads and handlers; stop them all on the way out."""
    runner.status_slot()  # first: before our files and other threads take descriptors below 10
    spool.init()
    parts.health.lock(clock.now())
    parts.poison.start()  # before anything is handled: files two daemons died on go first
    parts.attempts.confinement.start()  # before any attempt: where limits go, or why nowhere
    parts.health.settings.update(parts.attempts.confinement.public())
    parts.guard.check()
    parts.wake.install()
    runner.close_on_exec_all()  # once: a library's descriptors must not leak to tasks
    parts.attempts.keeper.start()  # after: nor to the keeper
    parts.housekeeper.start()
    parts.aftermath.start()
    try:
        parts.exporter.start()  # counts off the loop: a long count never delays it
        yield
    finally:
        parts.exporter.stop()
        parts.housekeeper.stop()
        parts.aftermath.stop()
        parts.wake.close()
        parts.attempts.close()
        parts.attempts.confinement.stop()
        parts.poison.stop()
        parts.health.unlock()
