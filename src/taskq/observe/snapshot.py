"""What the daemon's loop reports about itself after each iteration.

The health record in run/ (daemon/health.py), systemd's STATUS= line and
the metrics (observe/metrics.py) are all made from one Snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Snapshot:
    """What the loop reports about itself; all durations in µs."""

    dispatching: bool
    reason: str | None
    stopping: bool
    uncertainty: int
    offset: int
    busy: int
    due_soon: int
    claims_won: int = 0
    claims_lost: int = 0
