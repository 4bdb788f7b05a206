"""The daemon's settings: each one's default, range and help, and the values it runs with.

DURATIONS is the one source of the daemon's duration options: the
default as an operator types it, the range a value must fall in, the
help text; `taskq daemon`'s click options are made from it (cli/daemon.py)
and Settings takes its defaults from it. Every duration is in
microseconds. A range is checked once at start-up, so that an option
which parses but would break the daemon later (a lease of a microsecond
spins the loop) is refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from taskq.daemon.cgroups import MODES
from taskq.daemon.loadgate import DEFAULT_INTERVAL, DEFAULT_LIMITS
from taskq.errors import BadInput
from taskq.spool.retention import TMP_MAX_AGE
from taskq.times.timespec import DAY, HOUR, MS, SECOND, format_duration, parse_duration


class Knob(NamedTuple):
    """A duration option: its default as typed, its range in µs, its help."""

    default: str
    least: int
    most: int
    help: str
    off: bool = False  # 0 turns it off (allowed below the range)

    @property
    def us(self) -> int:
        return parse_duration(self.default)


DURATIONS = {
    "lease": Knob("60s", 500 * MS, DAY, "Lease of a claim; renewed every third of it."),
    "retry_delay": Knob(
        "10s", 0, 30 * DAY, "Backoff before the first retry; doubles each attempt, with jitter."
    ),
    "retry_cap": Knob("1h", 0, 30 * DAY, "Longest backoff."),
    "rescan": Knob("30s", 100 * MS, DAY, "Safety-net rescan interval."),
    "clock_margin": Knob(
        "1ms",
        0,
        HOUR,
        "Clock uncertainty allowed for: never start before run_at + offset + margin.",
    ),
    "doorbell_poll": Knob(
        "250ms",
        10 * MS,
        HOUR,
        "How often to stat the doorbell for other hosts' submissions; 0 turns it off.",
        off=True,
    ),
    "max_uncertainty": Knob(
        "2s", 0, HOUR, "Stop dispatching while the clock uncertainty exceeds this."
    ),
    "clock_check": Knob(
        "10s", 100 * MS, DAY, "How often to measure the clock against the spool filesystem's."
    ),
    "kill_grace": Knob("10s", 0, DAY, "Between SIGTERM and SIGKILL on --timeout."),
    "shutdown_grace": Knob("10s", 0, DAY, "How long SIGTERM waits for running attempts."),
    "load_interval": Knob(
        f"{DEFAULT_INTERVAL // SECOND}s",  # atd -b's default, the load gate's own
        0,
        DAY,
        "Least time between two starts in a load-gated queue, as atd -b.",
    ),
}
WORKERS = (8, 1, 4096)  # --workers: default, least, most
KEEP_DONE = "7d"  # --keep-done, or "never"
CGROUP_MODES = MODES  # --cgroups; the first is the default


def _default(name: str) -> int:
    return DURATIONS[name].us


@dataclass
class Settings:
    """How one daemon runs: workers, lease, clocks, retries, scans and retention."""

    workers: int = WORKERS[0]
    lease: int = _default("lease")
    host_id: str = "localhost"
    retry_delay: int = _default("retry_delay")  # the first retry's backoff; doubles each attempt
    retry_cap: int = _default("retry_cap")
    kill_grace: int = _default("kill_grace")  # between TERM and KILL on timeout or cancel
    shutdown_grace: int = _default("shutdown_grace")
    rescan: int = _default("rescan")  # the safety-net rescan interval
    doorbell_poll: int = _default("doorbell_poll")  # other hosts' submits; 0: off
    queue_limits: dict[str, int] = field(default_factory=dict)  # per-queue concurrency caps
    load_limits: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    load_interval: int = _default("load_interval")  # between two starts in a load-gated queue
    clock_margin: int = _default("clock_margin")
    max_uncertainty: int = _default("max_uncertainty")  # above it, stop dispatching
    clock_check: int = _default("clock_check")  # how often to measure the clock offset
    tmp_max_age: int = TMP_MAX_AGE
    keep_done: int | None = parse_duration(KEEP_DONE)  # done/ retention, hourly; None keeps all
    metrics_file: str | None = None  # a node_exporter textfile, rewritten every few seconds
    metrics_listen: tuple[str, int] | None = None  # (address, port) to serve /metrics on
    cgroups: str = CGROUP_MODES[0]  # where attempts with limits get cgroups: auto, v2, v1, none

    def check(self) -> None:
        """Refuse a duration out of its range, naming the option and the range."""
        for name, knob in DURATIONS.items():
            value = getattr(self, name)
            if knob.off and value == 0:
                continue
            if not knob.least <= value <= knob.most:
                option = "--" + name.replace("_", "-")
                raise BadInput(
                    f"{option} {format_duration(value)} is out of range: "
                    f"from {format_duration(knob.least)} to {format_duration(knob.most)}"
                )
        if self.max_uncertainty <= self.clock_margin:  # the uncertainty is offset + margin
            raise BadInput(
                f"--max-uncertainty {format_duration(self.max_uncertainty)} must be more than "
                f"--clock-margin {format_duration(self.clock_margin)}: it could never dispatch"
            )
