"""`taskq schedule run`, `skip` and `backfill`: occurrences asked for, or passed over, by hand.

They join the `taskq schedule` group (cli/schedule.py); what they do is
schedules/asked.py's (run, backfill) and the store's (skip).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from taskq.cli import output
from taskq.cli.common import spool_of
from taskq.cli.params import Count
from taskq.errors import BadInput
from taskq.schedules import asked, view
from taskq.schedules.store import Store
from taskq.times.clock import wall_us
from taskq.times.timespec import format_iso
from taskq.times.when import parse_when

JSON_HELP = "Print JSON instead of text."


def _echo(as_json: bool, doc: Any, text: str) -> None:
    """Say what was done, once it is durable: printed or not, it was done (cli/output.py)."""
    output.done(json.dumps(doc, indent=1) if as_json else text)


@click.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Run even if the overlap policy says otherwise.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def run(ctx: click.Context, name: str, force: bool, as_json: bool) -> None:
    """Run schedule NAME now, as an occurrence of it (a manual slot)."""
    store, now = Store(spool_of(ctx)), wall_us()
    sched = store.read(name)
    made, after = asked.run_now(store, sched, now, force)
    doc = {
        "name": name,
        "slot": format_iso(made.slot),
        "task": made.task,
        "after": after,
        "stopping": after if sched.overlap == "replace" else [],
    }
    waits = f", once {', '.join(after)} ended" if after else ""
    _echo(as_json, doc, f"{name}: running {made.task} now{waits}")


@click.command()
@click.argument("name")
@click.option("-n", "count", type=Count(1, view.MAX_SKIP), help="Skip the next N occurrences.")
@click.option("--until", "until", metavar="WHEN", help="Skip the occurrences before WHEN.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def skip(
    ctx: click.Context, name: str, count: int | None, until: str | None, as_json: bool
) -> None:
    """Skip the next occurrences of NAME (default: the next one); resume undoes it."""
    store, now = Store(spool_of(ctx)), wall_us()
    sched = store.read(name)
    if count is not None and until is not None:
        raise BadInput("give -n N or --until WHEN, not both")
    state = store.state(name, sched.since)
    if until is not None:
        before = parse_when(until, now)
        skipped = [s for s, _ in view.upcoming(sched, state, now, view.MAX_SKIP) if s < before]
    else:
        plain = dataclasses.replace(sched, skip_before=None)
        skipped = [s for s, _ in view.upcoming(plain, state, now, count or 1)]
        if not skipped:
            raise BadInput(f"schedule {name} has no next occurrence to skip")
        before = skipped[-1] + 1
    skipped = asked.skip(store, sched, before, skipped, now)
    doc = {
        "name": name,
        "skip_before": format_iso(before),
        "skipped": [format_iso(s) for s in skipped],
    }
    _echo(as_json, doc, f"{name}: skipping {len(skipped)} slot(s) before {format_iso(before)}")


@click.command()
@click.argument("name")
@click.option("--from", "lo", metavar="WHEN", required=True, help="The first slot's earliest time.")
@click.option("--to", "hi", metavar="WHEN", required=True, help="The last slot's latest time.")
@click.option(
    "--overlap",
    type=click.Choice(["queue", "allow"]),
    default="queue",
    show_default=True,
    help="Run the slots one after another, oldest first, or all at once.",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def backfill(ctx: click.Context, name: str, lo: str, hi: str, overlap: str, as_json: bool) -> None:
    """Run the slots of NAME from --from to --to; each slot once, however often asked."""
    store, now = Store(spool_of(ctx)), wall_us()
    sched = store.read(name)
    made = asked.backfill(
        store, sched, parse_when(lo, now), parse_when(hi, now), overlap == "queue", now
    )
    docs = [{"slot": format_iso(m.slot), "task": m.task, "created": m.created} for m in made]
    lines = [f"{d['slot']}  {d['task']}" + ("" if d["created"] else "  (had one)") for d in docs]
    _echo(as_json, {"name": name, "occurrences": docs}, "\n".join(lines) or "no slot in range")
