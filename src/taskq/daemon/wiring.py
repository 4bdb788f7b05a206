"""The daemon's parts, made and wired together: which part tells which.

Each part owns one job (see daemon.py's docstring); this module only makes
them and hands each the others it reports to. The loop in daemon.py orders
them.
"""

from __future__ import annotations

from collections.abc import Callable

from taskq.daemon.aftermath import Aftermath
from taskq.daemon.attempts import Attempts
from taskq.daemon.clockguard import ClockGuard
from taskq.daemon.clusterlimits import ClusterLimits
from taskq.daemon.commit import GroupCommit
from taskq.daemon.crew import Crew
from taskq.daemon.dispatch import Dispatcher
from taskq.daemon.health import Health
from taskq.daemon.housekeeping import Housekeeper
from taskq.daemon.loadgate import LoadGate
from taskq.daemon.pickup import Pickup
from taskq.daemon.policy import Backoff
from taskq.daemon.recovery import Recovery
from taskq.daemon.settings import Settings
from taskq.daemon.settle import Settler
from taskq.daemon.starter import Starter
from taskq.daemon.wakeups import Wakeups
from taskq.observe.exporter import Exporter
from taskq.observe.metrics import Metrics
from taskq.schedules.materialise import Materialiser
from taskq.spool import config
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName
from taskq.spool.transitions import Owner
from taskq.times.clock import Clock
from taskq.times.timespec import SECOND


class Parts:
    """The parts of one daemon, as attributes of the daemon."""

    def __init__(
        self,
        spool: Spool,
        settings: Settings,
        clock: Clock,
        owner: Owner,
        on_requeued: Callable[[TaskName], None],
        on_measured: Callable[[bool], None],
    ) -> None:
        drop = spool.drop if spool.shared() else None
        self.wake = Wakeups(spool.doorbell, settings.doorbell_poll, clock.mono, drop)
        self.commit = GroupCommit(clock.mono, lambda: self.wake.continued)
        self.health = Health(spool.run, owner.host, owner.pid, _public(settings))
        self.attempts = Attempts(settings.kill_grace, self.wake.watch, self.wake.unwatch)
        backoff = Backoff(settings.retry_delay, settings.retry_cap)
        self.metrics = Metrics(settings.host_id, spool.root, settings.workers)
        self.exporter = Exporter(
            self.metrics,
            spool,
            settings.host_id,
            clock.now,
            settings.metrics_file,
            settings.metrics_listen,
        )
        spool_config = config.load(spool.root)
        self.aftermath = Aftermath(spool, spool_config.notify, clock.now, settings.rescan)
        self.settler = Settler(
            spool,
            self.commit,
            backoff,
            on_requeued,
            self.aftermath.ended,
            on_attempt_end=self.metrics.ended,
        )
        crew = Crew(spool, owner, clock, settings.lease, self.commit, self.settler)
        self.limits = ClusterLimits(
            crew,
            {**spool_config.queue_limits(), **settings.queue_limits},
            spool_config.queue_rates(),
            lambda path, why: self.settler.quarantine(path, why, clock.now()),
        )
        self.dispatcher = Dispatcher(
            crew, spool_config.security, settings.workers, self.metrics.claimed, self.limits
        )
        self.pickup = Pickup(crew, spool_config.security, settings.tmp_max_age)
        self.recovery = Recovery(crew, self.attempts, self.limits.taken_over)
        self.loadgate = LoadGate(settings.load_limits, settings.load_interval, mono=clock.mono)
        self.housekeeper = Housekeeper(
            spool, clock.now, settings.rescan, settings.tmp_max_age, settings.keep_done
        )
        self.guard = ClockGuard(
            clock,
            self.health.probe,
            settings.clock_check,
            settings.max_uncertainty,
            on_measured,
        )
        self.starter = Starter(crew, self.attempts, self.guard.check, self.metrics.started)
        self.schedules = Materialiser(
            spool, self.metrics.scheduled, self.aftermath.teller.tell_schedule
        )


def _public(cfg: Settings) -> dict[str, object]:
    """The settings a health record shows, in seconds."""
    return {
        "max_uncertainty": cfg.max_uncertainty / SECOND,
        "workers": cfg.workers,
        "lease": cfg.lease / SECOND,
        "clock_check": cfg.clock_check / SECOND,
    }
