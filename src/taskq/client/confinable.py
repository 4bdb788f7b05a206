"""Submit's look at whether any daemon could confine a task that asks for resource limits.

A daemon says in its health record (run/HOST_PID.status) which cgroup
backend it has and with which controllers, or why it has none. A task that
asks for limits while every daemon that runs says it cannot give them is
refused here, with the daemons' reason, rather than accepted to be refused
later. Where the submitter cannot know (no daemon runs, or one is too old
to say), the task is accepted and the daemon that takes it decides.
Tasks without limits never look.
"""

from __future__ import annotations

from collections.abc import Iterable

from taskq.errors import BadInput
from taskq.spool import rundir
from taskq.spool.layout import Spool
from taskq.spool.resources import Resources


def check(spool: Spool, asked: Iterable[Resources | None], local_host: str, now: int) -> None:
    """Raise BadInput if no running daemon could give the limits asked for."""
    wanted = [limits for limits in asked if limits is not None]
    if not wanted:
        return
    need = frozenset().union(*(limits.controllers() for limits in wanted))
    try:
        records = [r for r in rundir.daemons(spool.run, local_host, now) if r.get("alive")]
    except OSError:
        return  # run/ unreadable: the daemon decides
    if not records or any("cgroups" not in r for r in records):
        return
    for r in records:
        if r.get("cgroups") and need <= set(str(r.get("cgroup_controllers", "")).split()):
            return
    first = records[0]
    why = first.get("cgroups_problem") or (
        f"its cgroup {first.get('cgroups')} has only {first.get('cgroup_controllers') or 'none'}"
    )
    raise BadInput(
        f"{wanted[0].describe()}: no running daemon of this spool can confine it "
        f"({first.get('owner')}: {why})"
    )
