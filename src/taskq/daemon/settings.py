"""The daemon's settings, from its command line; every duration in microseconds.

It also owns the range each duration must fall in (RANGES), checked once at
start-up so that an option which parses but would break the daemon later
(a lease of a microsecond spins the loop) is refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskq.daemon.loadgate import DEFAULT_INTERVAL, DEFAULT_LIMITS
from taskq.errors import BadInput
from taskq.times.timespec import DAY, HOUR, MS, SECOND, format_duration

# option: (least, most); a doorbell poll may also be 0 (off)
RANGES = {
    "lease": (500 * MS, DAY),
    "retry_delay": (0, 30 * DAY),
    "retry_cap": (0, 30 * DAY),
    "rescan": (100 * MS, DAY),
    "doorbell_poll": (10 * MS, HOUR),
    "clock_margin": (0, HOUR),
    "max_uncertainty": (0, HOUR),
    "clock_check": (100 * MS, DAY),
    "kill_grace": (0, DAY),
    "shutdown_grace": (0, DAY),
    "load_interval": (0, DAY),
}


@dataclass
class Settings:
    """How one daemon runs: workers, lease, clocks, retries, scans and retention."""

    workers: int = 8
    lease: int = 60 * SECOND
    host_id: str = "localhost"
    retry_delay: int = 10 * SECOND  # the first retry's backoff; doubles each attempt
    retry_cap: int = HOUR
    kill_grace: int = 10 * SECOND  # between TERM and KILL on timeout or cancel
    shutdown_grace: int = 10 * SECOND
    rescan: int = 30 * SECOND  # the safety-net rescan interval
    doorbell_poll: int = 250 * MS  # stat the doorbell this often (other hosts' submits)
    queue_limits: dict[str, int] = field(default_factory=dict)  # per-queue concurrency caps
    load_limits: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    load_interval: int = DEFAULT_INTERVAL  # between two starts in a load-gated queue
    clock_margin: int = 1 * MS
    max_uncertainty: int = 2 * SECOND  # above it, stop dispatching
    clock_check: int = 10 * SECOND  # how often to measure the clock offset
    tmp_max_age: int = HOUR
    keep_done: int | None = 7 * DAY  # done/ retention, applied hourly; None keeps all
    metrics_file: str | None = None  # a node_exporter textfile, rewritten every few seconds
    metrics_listen: tuple[str, int] | None = None  # (address, port) to serve /metrics on

    def check(self) -> None:
        """Refuse a duration out of its range, naming the option and the range."""
        for name, (least, most) in RANGES.items():
            value = getattr(self, name)
            if name == "doorbell_poll" and value == 0:
                continue
            if not least <= value <= most:
                option = "--" + name.replace("_", "-")
                raise BadInput(
                    f"{option} {format_duration(value)} is out of range: "
                    f"from {format_duration(least)} to {format_duration(most)}"
                )
        if self.max_uncertainty <= self.clock_margin:  # the uncertainty is offset + margin
            raise BadInput(
                f"--max-uncertainty {format_duration(self.max_uncertainty)} must be more than "
                f"--clock-margin {format_duration(self.clock_margin)}: it could never dispatch"
            )
