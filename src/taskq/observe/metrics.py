"""The daemon's figures for Prometheus: what they are, and the collector that renders them.

What the loop knows (dispatching or not, the clock uncertainty, workers
busy, when it last started an attempt, each attempt's lateness and how
attempts ended) it hands over as it goes, for the cost of an assignment or
a counter's increment. What the spool holds (tasks per state and queue, the
overdue backlog) is counted elsewhere, off the loop (exporter.py), with
`taskq stats`'s own code, and handed over as its report. Rendering (a
scrape, a textfile) reads only what was handed over; it never counts.

Every series carries the labels `host` (the daemon's --host-id) and `spool`,
so that several daemons' files can sit side by side in one node_exporter
textfile directory.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import prometheus_client
import prometheus_client.metrics
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from taskq.observe.snapshot import Snapshot
from taskq.spool.states import STATES
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when

# Lateness is milliseconds with free workers, and anything up to hours with none.
LATENESS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
OUTCOMES = ("succeeded", "failed", "killed", "lost")
CLAIMS = ("won", "lost")
LABELS = ("host", "spool")


def outcome(code: int | None) -> str:
    """How an attempt ended, as the attempts counter names it."""
    if code is None:
        return "lost"
    if code < 0:
        return "killed"
    return "succeeded" if code == 0 else "failed"


@dataclass(frozen=True)
class LoopState:
    """The loop's state as of one iteration (handed over whole, so read whole)."""

    dispatching: bool
    uncertainty: float  # seconds
    busy: int
    at: float  # wall-clock seconds of the iteration


class Metrics:
    """The figures one daemon exports, in one registry."""

    def __init__(self, host: str, spool_root: str, workers: int) -> None:
        self.labels = {"host": host, "spool": spool_root}
        self.workers = workers
        # No *_created series: a textfile is read long after, and they only add noise.
        _no_created_series()
        self.registry = CollectorRegistry()
        self._lateness = Histogram(
            "taskq_lateness_seconds",
            "Start of each attempt this daemon started minus its run time.",
            LABELS,
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        ).labels(**self.labels)
        self._attempts = Counter(
            "taskq_attempts",
            "Attempts this daemon saw end, by outcome: succeeded (exit 0), failed "
            "(another exit status), killed (by a signal), lost (no status recorded).",
            (*LABELS, "outcome"),
            registry=self.registry,
        )
        for name in OUTCOMES:  # every outcome from the start, so rate() sees the first
            self._attempts.labels(**self.labels, outcome=name)
        self._claims = Counter(
            "taskq_claims",
            "Claim renames this daemon tried, by outcome: won, or lost (the task was gone: "
            "another daemon or a cancel moved it first).",
            (*LABELS, "outcome"),
            registry=self.registry,
        )
        self._claim = {name: self._claims.labels(**self.labels, outcome=name) for name in CLAIMS}
        self.loop: LoopState | None = None
        self.last_dispatch = 0.0
        self.report: dict[str, Any] | None = None  # stats.collect's, as last counted
        self.counted_at = 0.0
        self.count_seconds = 0.0
        self.schedules: dict[str, dict[str, Any]] = {}  # ends.health by schedule, each pass
        self.registry.register(_Rendered(self))

    # -- handed over by the loop (cheap) ----------------------------------

    def started(self, lateness: int, now: int) -> None:
        """An attempt started now (µs), this late (µs)."""
        self._lateness.observe(lateness / SECOND)
        self.last_dispatch = now / SECOND

    def claimed(self, won: bool) -> None:
        """A claim rename was tried: won, or lost to another daemon or a cancel."""
        self._claim["won" if won else "lost"].inc()

    def ended(self, code: int | None) -> None:
        """An attempt ended with this status (None: lost; negative: a signal)."""
        self._attempts.labels(**self.labels, outcome=outcome(code)).inc()

    def looped(self, snap: Snapshot, spool_full: bool) -> None:
        """The loop's state after an iteration; spool_full: a full spool holds dispatching."""
        dispatching = snap.dispatching and not spool_full
        self.loop = LoopState(dispatching, snap.uncertainty / SECOND, snap.busy, time.time())

    def stopped(self) -> None:
        """The loop has ended: no longer dispatching, whatever its last iteration said."""
        if self.loop is not None:
            self.loop = dataclasses.replace(self.loop, dispatching=False, at=time.time())

    def scheduled(self, health: dict[str, dict[str, Any]]) -> None:
        """Each schedule's health as the materialiser's last pass read it (one assignment)."""
        self.schedules = health

    # -- handed over by the counting thread -------------------------------

    def counted(self, report: dict[str, Any], at: float, seconds: float) -> None:
        """A `taskq stats` report taken at `at` (epoch seconds), which took `seconds`."""
        self.report, self.counted_at, self.count_seconds = report, at, seconds


def _no_created_series() -> None:
    """Export no *_created series, on every prometheus_client from Debian 12's 0.16 on."""
    disable = getattr(prometheus_client, "disable_created_metrics", None)
    if disable is not None:
        disable()
    else:  # before 0.17 only this flag (set from the environment at import) says so
        prometheus_client.metrics._use_created = False


class _Rendered(Collector):
    """Renders the gauges from what Metrics holds, at each scrape or write."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())  # no names to reserve: the registry holds nothing else by them

    def collect(self) -> Iterator[Metric]:
        m = self.m
        yield self._build_info()
        yield from self._loop(m.loop)
        if m.report is not None:
            yield from self._spool(m.report)
        yield from schedule_families(list(m.labels.values()), m.schedules)

    def _build_info(self) -> GaugeMetricFamily:
        # Only when figures are exported: a daemon without --metrics-* never pays for it.
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = version("taskq")
        except PackageNotFoundError:
            ours = "unknown"
        family = GaugeMetricFamily(
            "taskq_build_info",
            "Always 1: the taskq version and Python this daemon runs.",
            labels=[*LABELS, "version", "python"],
        )
        family.add_metric([*self.m.labels.values(), ours, platform.python_version()], 1)
        return family

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(LABELS))
        family.add_metric(list(self.m.labels.values()), value)
        return family

    def _loop(self, loop: LoopState | None) -> Iterator[Metric]:
        g = self._gauge
        yield g("taskq_workers", "Attempts this daemon runs at once (--workers).", self.m.workers)
        yield g(
            "taskq_last_dispatch_timestamp_seconds",
            "When this daemon last started an attempt (0: not yet).",
            self.m.last_dispatch,
        )
        if loop is None:
            return
        yield g(
            "taskq_dispatching",
            "1 while this daemon dispatches; 0 while it does not (an untrusted clock, "
            "a full spool, stopping).",
            float(loop.dispatching),
        )
        yield g("taskq_workers_busy", "Attempts this daemon runs now.", loop.busy)
        yield g(
            "taskq_clock_uncertainty_seconds",
            "How far this daemon's clock may be from the spool filesystem's, margin included.",
            loop.uncertainty,
        )
        yield g(
            "taskq_loop_timestamp_seconds",
            "When this daemon's loop last went round.",
            loop.at,
        )

    def _spool(self, report: dict[str, Any]) -> Iterator[Metric]:
        labels = list(self.m.labels.values())
        counts: dict[str, dict[str, int]] = report["counts"]
        queues = sorted({q for per_queue in counts.values() for q in per_queue})
        tasks = GaugeMetricFamily(
            "taskq_tasks",
            "Tasks in the spool by state and queue, as taskq stats counts them.",
            labels=[*LABELS, "state", "queue"],
        )
        for state in STATES:
            for queue in queues:
                tasks.add_metric([*labels, state, queue], counts.get(state, {}).get(queue, 0))
        yield tasks
        overdue = GaugeMetricFamily(
            "taskq_overdue_tasks",
            "Pending tasks whose run time has passed, by queue.",
            labels=[*LABELS, "queue"],
        )
        oldest = GaugeMetricFamily(
            "taskq_oldest_overdue_age_seconds",
            "How long ago the run time of the oldest overdue task passed, by queue (0: none).",
            labels=[*LABELS, "queue"],
        )
        late: dict[str, dict[str, Any]] = report["overdue"]
        for queue in queues:
            overdue.add_metric([*labels, queue], late.get(queue, {}).get("count", 0))
            oldest.add_metric([*labels, queue], late.get(queue, {}).get("oldest_age", 0.0))
        yield overdue
        yield oldest
        yield self._gauge(
            "taskq_spool_counted_timestamp_seconds",
            "When the spool's tasks above were counted.",
            self.m.counted_at,
        )
        yield self._gauge(
            "taskq_spool_count_duration_seconds",
            "How long that count took.",
            self.m.count_seconds,
        )


def schedule_families(labels: list[str], health: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """The per-schedule series, from each schedule's health (schedules/ends.py)."""
    names = [*LABELS, "schedule"]
    families = {
        "last_success": GaugeMetricFamily(
            "taskq_schedule_last_success_timestamp_seconds",
            "When the schedule's latest successful occurrence ended (0: never).",
            labels=names,
        ),
        "last_slot": GaugeMetricFamily(
            "taskq_schedule_last_slot_timestamp_seconds",
            "The schedule's latest slot decided (made a task, or skipped).",
            labels=names,
        ),
        "failures_in_a_row": GaugeMetricFamily(
            "taskq_schedule_failures_in_a_row",
            "Failed occurrences since the last success.",
            labels=names,
        ),
        "paused": GaugeMetricFamily(
            "taskq_schedule_paused",
            "1 while the schedule is paused (by schedule pause or --pause-after-failures).",
            labels=names,
        ),
    }
    missed = CounterMetricFamily(
        "taskq_schedule_missed_slots",
        "Slots that fell due while every daemon was down (caught up or not).",
        labels=names,
    )
    skipped = CounterMetricFamily(
        "taskq_schedule_skipped_slots",
        "Slots not run, by reason: catchup, overlap, paused, skip, replaced.",
        labels=[*names, "reason"],
    )
    for name, h in sorted(health.items()):
        for key, family in families.items():
            family.add_metric([*labels, name], _seconds(h.get(key)))
        missed.add_metric([*labels, name], h.get("missed", 0))
        for reason, count in sorted(h.get("skipped", {}).items()):
            skipped.add_metric([*labels, name, reason], count)
    yield from families.values()
    yield missed
    yield skipped


def _seconds(value: Any) -> float:
    """An ISO instant as epoch seconds, a count as itself, None as 0."""
    if value is None:
        return 0.0
    if isinstance(value, bool | int | float):
        return float(value)
    return parse_when(str(value), 0) / SECOND
