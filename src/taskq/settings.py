"""The daemon's settings, from its command line; every duration in microseconds."""

from __future__ import annotations

from dataclasses import dataclass, field

from taskq.timespec import DAY, HOUR, MS, SECOND


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
    clock_margin: int = 1 * MS
    max_uncertainty: int = 2 * SECOND  # above it, stop dispatching
    clock_check: int = 10 * SECOND  # how often to measure the clock offset
    tmp_max_age: int = HOUR
    keep_done: int | None = 7 * DAY  # done/ retention, applied hourly; None keeps all
    metrics_file: str | None = None  # a node_exporter textfile, rewritten every few seconds
    metrics_listen: tuple[str, int] | None = None  # (address, port) to serve /metrics on
