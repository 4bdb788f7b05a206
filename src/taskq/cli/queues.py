"""`taskq pause` and `taskq resume`: holding a queue's tasks back on every daemon."""

from __future__ import annotations

import click

from taskq.cli import output
from taskq.cli.common import existing_spool
from taskq.cli.params import PlainHelp
from taskq.client import request
from taskq.errors import BadInput
from taskq.spool import pause
from taskq.spool.task import check_queue
from taskq.times.clock import wall_us
from taskq.times.timespec import format_iso


@click.command(cls=PlainHelp, name="pause")
@click.argument("queues", metavar="QUEUE...", nargs=-1, required=True)
@click.option(
    "--until",
    metavar="WHEN",
    help="Resume by itself at WHEN (a time as for submit --at) [default: when resumed].",
)
@click.pass_context
def pause_command(ctx: click.Context, queues: tuple[str, ...], until: str | None) -> None:
    """Stop starting the queues' tasks, on every daemon, until resumed (or --until)."""
    now = wall_us()
    when = None if until is None else request.run_at(until, None, now, ("--until", "--until"))
    if when is not None and when <= now:
        raise BadInput(f"--until {until} is not in the future")
    names = list(dict.fromkeys(check_queue(q) for q in queues))  # each once, in order
    spool = existing_spool(ctx)
    lines = []
    for held in pause.pause(spool, names, when, now):
        shown = "until resumed" if held.until is None else f"until {format_iso(held.until)}"
        lines.append(f"paused {held.queue} {shown}")
    output.done("\n".join(lines))


@click.command(cls=PlainHelp, name="resume")
@click.argument("queues", metavar="QUEUE...", nargs=-1, required=True)
@click.pass_context
def resume_command(ctx: click.Context, queues: tuple[str, ...]) -> None:
    """Start the queues' tasks again; they drain through the usual fair scheduling."""
    names = list(dict.fromkeys(check_queue(q) for q in queues))  # each once, in order
    pause.resume(existing_spool(ctx), names)
    output.done("\n".join(f"resumed {name}" for name in names))
