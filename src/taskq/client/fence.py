"""Fencing tokens: a number per attempt that only grows, and whether an attempt still holds.

A claim's name already carries two durable values that only grow: the
attempt number (each retry, the daemon's or an operator's, adds one) and
the lease expiry (a renewal moves it later, and a daemon takes a claim over
only once its lease has surely expired by the reference clock, then writes
its own, later, expiry). The token is the pair (attempt, expiry at the
start), packed into one integer: attempt * 10**13 + the expiry in
milliseconds since the epoch. So an attempt's token is larger than that of
every earlier attempt, whatever the hosts' clocks, and a second start of
the same attempt number (its first claim taken over before it began) is
larger than the first by at least the lease. It fits a signed 64-bit
integer for attempts up to 922,336, the last a task can have
(task.MAX_ATTEMPT: neither a retry nor a name read goes past it).

`check` is what `taskq fence-check` asks: does this attempt still hold its
claim? Only a claim in claimed/ of the same task and attempt, in the phase
`started`, owned on the attempt's own host (a daemon there that adopted
the attempt holds it for it), and with its lease not yet run out.
"""

from __future__ import annotations

from taskq.errors import BadInput, Conflict
from taskq.spool import byid
from taskq.spool.layout import Spool
from taskq.spool.states import Phase
from taskq.spool.task import ClaimName
from taskq.times.timespec import format_iso

SCALE = 10**13  # expiries in ms stay below it until the year 2286


def token(claim: ClaimName) -> int:
    """The fencing token of an attempt started under this claim."""
    return claim.task.attempt * SCALE + claim.expiry // 1000


def attempt_of(fence: int) -> int:
    return fence // SCALE


def parse(text: str) -> int:
    """A token as given to fence-check; BadInput if it is not one."""
    if not text.isdigit() or attempt_of(int(text)) < 1:
        raise BadInput(f"bad fencing token {text!r}: expected TASKQ_FENCE's number")
    return int(text)


def check(spool: Spool, task_id: str, fence: int, host: str, now: int) -> ClaimName:
    """Return the claim the attempt holds; raise Conflict saying why it holds none.

    claimed/ is listed, not a name looked up: it holds one file per running
    attempt, and a listing is fresh on shared filesystems where a looked-up
    name can linger after another host renamed it.
    """
    attempt = attempt_of(fence)
    found = byid.claimed(spool, task_id)
    held = None if found is None else found.claim
    why = _why_not(held, attempt, host, now)
    if why is not None:
        raise Conflict(f"task {task_id} attempt {attempt} no longer holds its claim: {why}")
    assert held is not None
    return held


def _why_not(held: ClaimName | None, attempt: int, host: str, now: int) -> str | None:
    if held is None:
        return "the task is not claimed (it ended, or went back to pending)"
    if held.task.attempt != attempt:
        return f"attempt {held.task.attempt} holds it now"
    if held.host != host:
        return f"taken over by {held.daemon}"
    if held.phase == Phase.CANCELLING:
        return "a cancel was requested"
    if held.phase != Phase.STARTED:
        return f"the claim is in phase {held.phase}"
    if held.expiry <= now:
        return f"its lease ran out at {format_iso(held.expiry)} (is its daemon stopped?)"
    return None
