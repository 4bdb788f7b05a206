"""The spool's vocabulary: the states a task can be in and the phases of a claim.

A task's state is the directory its file is in (layout.py names them):
waiting/, pending/BUCKET/, claimed/, done/DAY/, failed/ or cancelled/. A
file in claimed/ carries its phase in its name (claimed, started or
cancelling), and the phase decides the state: a task `claimed` by a
daemon has not started, a `started` one is running, a `cancelling` one
was started and then cancelled (its daemon is stopping it). These are
the words on disk and in every listing; StrEnum members compare equal to
them.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """Where a task is, in the order tasks move through the states."""

    WAITING = "waiting"  # for its dependencies (--after)
    PENDING = "pending"
    CLAIMED = "claimed"  # in claimed/, not started
    RUNNING = "running"  # in claimed/, started
    CANCELLING = "cancelling"  # in claimed/, started and then cancelled
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Phase(StrEnum):
    """The phase a claim's file name carries."""

    CLAIMED = "claimed"  # taken under a lease, not started
    STARTED = "started"  # the point of no return before exec
    CANCELLING = "cancelling"  # started, then cancelled: its daemon stops it


STATES = tuple(State)
END_STATES = (State.DONE, State.FAILED, State.CANCELLED)
PHASE_OF = {
    State.CLAIMED: Phase.CLAIMED,
    State.RUNNING: Phase.STARTED,
    State.CANCELLING: Phase.CANCELLING,
}
STATE_OF = {phase: state for state, phase in PHASE_OF.items()}
