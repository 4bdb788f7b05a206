"""The daemon's parts, made and wired together: which part tells which.

Each part owns one job (docs/design.md, "A map of the daemon");
build_parts makes them and hands each the others it reports to, and
returns them as one Parts. The daemon holds its Parts and orders them
(loop.py); the unit tests build the same Parts, wired the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from taskq.daemon.aftermath import Aftermath
from taskq.daemon.attempts import Attempts
from taskq.daemon.clockguard import ClockGuard
from taskq.daemon.clusterlimits import ClusterLimits
from taskq.daemon.commit import GroupCommit
from taskq.daemon.confinement import Confinement
from taskq.daemon.crew import Crew
from taskq.daemon.dispatch import Dispatcher
from taskq.daemon.health import Health
from taskq.daemon.housekeeping import Housekeeper
from taskq.daemon.loadgate import LoadGate
from taskq.daemon.pickup import Pickup
from taskq.daemon.poison import PoisonGuard
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
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import SECOND


@dataclass
class Parts:
    """The parts of one daemon."""

    wake: Wakeups
    commit: GroupCommit
    health: Health
    attempts: Attempts
    metrics: Metrics
    exporter: Exporter
    aftermath: Aftermath
    settler: Settler
    limits: ClusterLimits
    dispatcher: Dispatcher
    pickup: Pickup
    recovery: Recovery
    loadgate: LoadGate
    housekeeper: Housekeeper
    guard: ClockGuard
    starter: Starter
    schedules: Materialiser
    poison: PoisonGuard


def build_parts(
    spool: Spool,
    settings: Settings,
    clock: Clock,
    daemon: DaemonId,
    on_measured: Callable[[bool], None] = lambda regained: None,
) -> Parts:
    """Make one daemon's parts, each told of the others it reports to.

    Nothing starts (no thread, signal handler or lock: lifecycle.running
    does that); on_measured(regained) follows each clock measurement.
    """
    drop = spool.drop if spool.shared() else None
    wake = Wakeups(spool.doorbell, settings.doorbell_poll, clock.mono, drop)
    commit = GroupCommit(clock.mono, lambda: wake.continued)
    health = Health(spool.run, daemon.host, daemon.pid, _public(settings))
    confinement = Confinement(settings.cgroups, f"{daemon.host}_{daemon.pid}", clock.mono)
    attempts = Attempts(settings.kill_grace, wake.watch, wake.unwatch, confinement, settings.lease)
    metrics = Metrics(settings.host_id, spool.root, settings.workers)
    exporter = Exporter(
        metrics, spool, settings.host_id, clock.now, settings.metrics_file, settings.metrics_listen
    )
    spool_config = config.load(spool.root)
    poison = PoisonGuard(spool, daemon.host, daemon.pid, clock.now)
    aftermath = Aftermath(spool, spool_config.notify, clock.now, settings.rescan, poison.resolving)
    backoff = Backoff(settings.retry_delay, settings.retry_cap)
    settler = Settler(
        spool, commit, backoff, lambda name: None, aftermath.ended, on_attempt_end=metrics.ended
    )
    crew = Crew(spool, daemon, clock, settings.lease, commit, settler, poison)
    limits = _limits(crew, spool_config, settings)
    dispatcher = Dispatcher(crew, spool_config.security, settings.workers, metrics.claimed, limits)
    settler.requeued = dispatcher.index.push  # a task back in pending is due again
    guard = ClockGuard(
        clock, health.probe, settings.clock_check, settings.max_uncertainty, on_measured
    )
    return Parts(
        wake=wake,
        commit=commit,
        health=health,
        attempts=attempts,
        metrics=metrics,
        exporter=exporter,
        aftermath=aftermath,
        settler=settler,
        limits=limits,
        dispatcher=dispatcher,
        pickup=Pickup(crew, spool_config.security, settings.tmp_max_age),
        recovery=Recovery(crew, attempts, limits.taken_over),
        loadgate=LoadGate(settings.load_limits, settings.load_interval, mono=clock.mono),
        housekeeper=Housekeeper(
            spool, clock.now, settings.rescan, settings.tmp_max_age, settings.keep_done
        ),
        guard=guard,
        starter=Starter(crew, attempts, guard.check, metrics.started),
        schedules=Materialiser(
            spool, metrics.scheduled, aftermath.teller.tell_schedule, poison.handling
        ),
        poison=poison,
    )


def _limits(crew: Crew, spool_config: config.SpoolConfig, settings: Settings) -> ClusterLimits:
    """The cluster-wide queue limits: the daemon's options over config.toml's."""
    return ClusterLimits(
        crew,
        {**spool_config.queue_limits(), **settings.queue_limits},
        spool_config.queue_rates(),
        lambda path, why: crew.settler.quarantine(path, why, crew.clock.now()),
    )


def _public(cfg: Settings) -> dict[str, object]:
    """The settings a health record shows, in seconds."""
    return {
        "max_uncertainty": cfg.max_uncertainty / SECOND,
        "workers": cfg.workers,
        "lease": cfg.lease / SECOND,
        "clock_check": cfg.clock_check / SECOND,
    }
