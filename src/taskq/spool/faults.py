"""Crash points for fault-injection tests; free when TASKQ_CRASH_AT is unset.

Every step of every transition names a crash point. With TASKQ_CRASH_AT set
to a point's name (or NAME:N, the Nth time it is reached), the process
kills itself with SIGKILL there, exactly as a power cut or kill -9 would
stop it between two system calls. Tests then restart taskq and check that
no accepted task is lost, none starts early, and every repeat is recorded.

With TASKQ_CRASH_SIGNAL=STOP the process stops itself there instead
(SIGSTOP), so a test can change the spool under it, as a racing daemon
would, and then let it go on with SIGCONT. With TASKQ_CRASH_SIGNAL=RAISE
it raises Injected there, as a bug in the code handling a file would.
"""

from __future__ import annotations

import os

_SPEC = os.environ.get("TASKQ_CRASH_AT") or None
_NAME, _, _NTH = (_SPEC or "").partition(":")
_WHEN = int(_NTH) if _NTH.isdigit() else 1
_seen = 0

POINTS = (
    "submit.written",  # the body is durable in tmp/, not yet published
    "submit.key-bound",  # the key file names the task, which is still in tmp/
    "submit.renamed",  # the task is in its bucket; the bucket is not yet synced
    "submit.synced",  # durable; the id is not yet printed
    "rekey.read",  # a key's holder is read under its take-over marker, nothing decided
    "daemon.claimed",  # pending -> claimed, not yet committed
    "daemon.read",  # a claim's body is read (in the poison guard's handling), nothing decided
    "daemon.started",  # claimed -> started, not yet committed
    "daemon.committed",  # the start is durable; the child is not yet spawned
    "daemon.staged",  # the attempt's files are made, empty and unlocked, ahead of its instant
    "daemon.asked",  # the keeper holds the attempt, to spawn at its instant; no answer heard
    "daemon.spawned",  # the child runs; its start is not yet journalled
    "daemon.reaped",  # the child has ended; the task has not moved on
    "daemon.finished",  # started -> done/failed/pending (retry), not yet committed
    "daemon.renewed",  # a lease renewed, not yet committed
    "daemon.taken-over",  # another owner's claim is ours, not yet settled
    "daemon.released",  # a claim released to pending, not yet committed
    "daemon.quarantined",  # a bad file moved to corrupt/, its reason not yet written
    "pickup.read",  # a claimed drop file is read (in the poison guard's handling), nothing filed
    "cancel.renamed",  # the task is cancelled (or cancelling), not yet synced
    "reschedule.recorded",  # the new schedule is journalled, the task not yet moved
    "reschedule.moved",  # the task is in its new bucket; its ids/ hint still names the old
    "retry.recorded",  # the retry is journalled, the task not yet moved
    "reschedule.moved",  # the task is at its new time, not yet synced
    "retry.moved",  # the task is back in pending, not yet synced
)


def crash_point(name: str) -> None:
    """Die here with SIGKILL (or stop, or raise: see above) if the tests asked for this point."""
    global _seen
    if _SPEC is None or name != _NAME:
        return
    _seen += 1
    if _seen == _WHEN:
        import signal  # only here: off submit's import budget (tests/e2e/test_submit.py)

        how = os.environ.get("TASKQ_CRASH_SIGNAL")
        if how == "RAISE":
            raise Injected(f"injected at {name}")
        os.kill(os.getpid(), signal.SIGSTOP if how == "STOP" else signal.SIGKILL)


def armed(name: str) -> bool:
    """Whether the tests asked for this point: a loop of thousands need not pass it otherwise."""
    return _SPEC is not None and name == _NAME


class Injected(Exception):
    """What a crash point raises with TASKQ_CRASH_SIGNAL=RAISE: an unexpected error."""
