"""`taskq schedule`: recurring tasks, as commands of their own click group.

Parse the options, build the schedule (its task template through
request.py, as submit does), write it and make its first occurrence; list,
show, pause, resume and remove schedules. Errors are TaskqErrors, which
cli/main.py turns into a message and an exit status. This module is
imported only when a `taskq schedule` command runs.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from taskq.cli import output, schedule_asked
from taskq.cli.common import init_spool, read_stdin, spool_of
from taskq.cli.params import (
    DURATION,
    ENV_VAR,
    POSITIVE_DURATION,
    Count,
    PlainGroup,
    limit_options,
    limits_of,
)
from taskq.client import request
from taskq.errors import BadInput, CorruptFile, NotFound
from taskq.schedules import materialise, view
from taskq.schedules.rules import check_date
from taskq.schedules.slots import (
    Spec,
    check_bound,
    check_cron,
    check_zone,
    every_anchor,
    local_text,
)
from taskq.schedules.store import (
    MAX_FAILURES,
    MAX_RULES,
    OVERLAP,
    Schedule,
    Store,
    check_catchup,
    check_name,
)
from taskq.schedules.view import describe, detail
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_PRIORITY,
    MAX_STDIN,
    Request,
    TaskName,
    check_queue,
)
from taskq.text.quote import quote
from taskq.times import zones
from taskq.times.clock import wall_us
from taskq.times.timespec import format_duration, format_iso
from taskq.times.when import parse_when

JSON_HELP = "Print JSON instead of text."


def _store(ctx: click.Context) -> Store:
    return Store(Spool(ctx.obj["spool"]))


def _now() -> int:
    return wall_us()


def _echo(as_json: bool, doc: Any, text: str) -> None:
    output.write(json.dumps(doc, indent=1) if as_json else text)


def _done(as_json: bool, doc: Any, text: str) -> None:
    """What a change of a schedule did, once durable (output.done)."""
    output.done(json.dumps(doc, indent=1) if as_json else text, text)


@click.group(cls=PlainGroup)
def schedule() -> None:
    """Recurring tasks: cron expressions or intervals, each occurrence a task."""


@schedule.command()
@click.argument("name")
@click.option(
    "--cron",
    "cron",
    metavar="EXPR",
    multiple=True,
    help="5-field cron expression or @hourly etc. (repeatable: the union).",
)
@click.option("--every", type=POSITIVE_DURATION, metavar="DURATION", help="Exact interval.")
@click.option(
    "--every-after",
    type=POSITIVE_DURATION,
    metavar="DURATION",
    help="Run DURATION after the previous occurrence ended.",
)
@click.option(
    "--except-cron",
    metavar="EXPR",
    multiple=True,
    help="Not the slots this expression names too (repeatable).",
)
@click.option(
    "--except",
    "except_dates",
    metavar="DATE",
    multiple=True,
    help="No slot on this local date, YYYY-MM-DD (repeatable).",
)
@click.option("--tz", metavar="ZONE", help="IANA time zone of --cron [default: the local zone].")
@click.option(
    "--catchup",
    default="latest",
    show_default=True,
    metavar="skip|latest|all[:N]",
    help="Slots missed while every daemon was down: run none, the last, or up to N.",
)
@click.option(
    "--overlap",
    type=click.Choice(list(OVERLAP)),
    default="skip",
    show_default=True,
    help="A slot due while the previous occurrence runs: skip it, queue one, run both, "
    "or stop the previous one and run.",
)
@click.option(
    "--pause-after-failures",
    "pause_after",
    type=Count(1, MAX_FAILURES),
    metavar="N",
    help="Pause the schedule after N failed occurrences in a row.",
)
@click.option(
    "--jitter",
    type=DURATION,
    default="0s",
    show_default=True,
    metavar="DURATION",
    help="Start each occurrence up to DURATION after its slot, at random.",
)
@click.option("--start", metavar="WHEN", help="No slot before WHEN.")
@click.option("--end", metavar="WHEN", help="No slot after WHEN.")
@click.option("--replace", is_flag=True, help="Replace a schedule of that name.")
@click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="Queue of each occurrence.")
@click.option(
    "--priority",
    type=Count(-MAX_PRIORITY, MAX_PRIORITY),
    default=0,
    show_default=True,
    metavar="N",
    help="Each occurrence's --priority in its queue (-1000 to 1000).",
)
@click.option(
    "--max-attempts",
    type=Count(1, request.MAX_ATTEMPTS),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts of each occurrence.",
)
@click.option("--timeout", type=POSITIVE_DURATION, metavar="DURATION", help="Kill a longer run.")
@click.option(
    "--expires",
    type=POSITIVE_DURATION,
    metavar="DURATION",
    help="Fail an occurrence instead of starting it later than its run time + DURATION.",
)
@click.option("--stdin", "use_stdin", is_flag=True, help="Store standard input for each run.")
@click.option("--env", type=ENV_VAR, multiple=True, metavar="K=V", help="Set a variable.")
@click.option("--cwd", type=click.Path(file_okay=False), help="Working directory.")
@limit_options
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.argument("command", nargs=-1, required=True)
@click.pass_context
def add(ctx: click.Context, /, **opts: Any) -> None:
    """Add schedule NAME running COMMAND; make its first occurrence."""

    now = _now()
    name = check_name(opts["name"])
    sched = _build(opts, now)
    store = Store(spool_of(ctx))
    init_spool(store.spool)  # it submits its first occurrence: it makes the spool as submit does
    if opts["replace"]:
        materialise.retire(store, name, now)
    replaced = store.create(sched, opts["replace"])
    store.log(name, Event.REPLACED if replaced else Event.ADDED, now)
    nxt = _first_pass(store, sched, now)
    doc = {"name": name, "replaced": replaced, **nxt}
    _done(opts["as_json"], doc, f"{name}: next run {nxt['next'] or 'never'}")


def _local_zone(for_cron: bool) -> str:
    """--tz's default: the local zone's name; --every, which no zone moves, takes UTC without."""
    try:
        return zones.local_zone_name()
    except BadInput:
        if for_cron:
            raise
        return "UTC"


def _build(opts: dict[str, Any], now: int) -> Schedule:
    crons = [check_cron(c) for c in opts["cron"]]
    if sum((bool(crons), opts["every"] is not None, opts["every_after"] is not None)) != 1:
        raise BadInput("give --cron EXPR, --every DURATION or --every-after DURATION")
    if opts["every_after"] is not None and opts["catchup"] != "latest":
        raise BadInput("--every-after has one slot outstanding at most: --catchup is latest")
    if len(crons) + len(opts["except_cron"]) + len(opts["except_dates"]) > 3 * MAX_RULES:
        raise BadInput(f"at most {MAX_RULES} each of --cron, --except-cron and --except")
    start, end = (
        None if opts[k] is None else check_bound(f"--{k} {opts[k]}", parse_when(opts[k], now))
        for k in ("start", "end")
    )
    if start is not None and end is not None and end < start:
        raise BadInput("--end is before --start")
    spec = Spec(
        cron=crons[0] if crons else None,
        every=opts["every"] if opts["every"] is not None else opts["every_after"],
        tz=check_zone(opts["tz"]) if opts["tz"] else _local_zone(bool(crons)),
        anchor=every_anchor(now, start),
        start=start,
        end=end,
    )
    template = Request(
        run_at=now,
        cwd=request.directory("--cwd", os.path.abspath(opts["cwd"] or os.getcwd())),
        env=request.environment(opts["env"]),
        queue=check_queue(opts["queue"]),
        max_attempts=opts["max_attempts"],
        timeout=opts["timeout"],
        expires=opts["expires"],
        stdin=_stdin() if opts["use_stdin"] else None,
        priority=opts["priority"],
        limits=limits_of(opts),
    )
    task = request.body(template, opts["command"], now)
    return Schedule(
        name=opts["name"],
        spec=spec,
        catchup=check_catchup(opts["catchup"]),
        overlap=opts["overlap"],
        jitter=opts["jitter"],
        task=task,
        created=now,
        since=now,
        also=tuple(crons[1:]),
        except_cron=tuple(check_cron(c) for c in opts["except_cron"]),
        except_dates=tuple(sorted({check_date(d) for d in opts["except_dates"]})),
        every_after=opts["every_after"] is not None,
        pause_after=opts["pause_after"],
    )


def _stdin() -> bytes:
    return request.payload("standard input", read_stdin("--stdin", MAX_STDIN))


def _first_pass(store: Store, sched: Schedule, now: int) -> dict[str, Any]:
    """Make the next occurrence now, so that `taskq ls` shows it before any daemon runs."""

    p = materialise.Pass(store, now, materialise.running_ids(store.spool))
    materialise.advance(p, sched)
    state = store.state(sched.name, sched.since)
    task = None if state.cursor_task is None else TaskName.parse(state.cursor_task).id
    return {"next": _iso(state.cursor) if state.cursor >= now else None, "task": task}


def _iso(us: int) -> str:
    return format_iso(us)


# -- reading -----------------------------------------------------------------


@schedule.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def ls_(ctx: click.Context, as_json: bool) -> None:
    """List the schedules: when, policies, next run."""
    store, now = _store(ctx), _now()
    rows = [row for name in store.names() if (row := _summary(store, name, now)) is not None]
    if as_json:
        output.write(json.dumps(rows, indent=1))
    elif rows:
        output.write(_table(rows))


def _table(rows: list[dict[str, Any]]) -> str:
    keys = ("name", "state", "next", "when", "tz", "catchup", "overlap")
    cells = [[k.upper() for k in keys]] + [[str(r.get(k) or "-") for k in keys] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(keys))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(c, widths, strict=True)).rstrip() for c in cells
    )


def _summary(store: Store, name: str, now: int) -> dict[str, Any] | None:
    """A schedule's row; a bad one's says why, in one line; None if it was removed meanwhile."""
    try:
        sched = store.read(name)
    except NotFound:
        return None
    except (CorruptFile, OSError) as e:
        return {"name": name, "when": f"(unreadable: {quote(str(e))})", "next": None}
    state = store.state(name, sched.since)
    nxt = view.next_slot(sched, state, now)
    return {
        "name": name,
        "when": view.when_text(sched),
        "tz": sched.spec.tz,
        "catchup": sched.catchup,
        "overlap": sched.overlap,
        "state": view.status(sched, state, nxt),
        "next": None if nxt is None else _iso(nxt),
    }


def _duration(us: int) -> str:
    return format_duration(us)


@schedule.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show a schedule: its request, recent occurrences and outcomes, next run."""

    store = _store(ctx)
    doc = detail(store, name, _now())
    output.write(json.dumps(doc, indent=1) if as_json else describe(doc))


@schedule.command(name="next")
@click.argument("name")
@click.option("-n", "count", type=Count(1, 10000), default=5, show_default=True, help="How many.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def next_(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """Print the next slots of a schedule, in UTC and in its zone."""

    store, now = _store(ctx), _now()
    sched = store.read(name)
    slots = view.upcoming(sched, store.state(name, sched.since), now, count)
    docs = [
        {"slot": _iso(s), "local": local_text(s, sched.spec.tz), "skipped": skip}
        for s, skip in slots
    ]
    lines = [f"{d['slot']}  {d['local']}" + ("  (skipped)" if d["skipped"] else "") for d in docs]
    _echo(as_json, docs, "\n".join(lines))


# -- changing ----------------------------------------------------------------


@schedule.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def pause(ctx: click.Context, name: str, as_json: bool) -> None:
    """Pause a schedule: its slots are skipped until resume (and never caught up)."""
    store, now = _store(ctx), _now()
    store.with_paused(name, True, now)
    store.log(name, Event.PAUSED, now)
    store.spool.ring()
    _done(as_json, {"name": name, "paused": True}, f"paused {name}")


@schedule.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def resume(ctx: click.Context, name: str, as_json: bool) -> None:
    """Resume a paused schedule from now on; make its next occurrence."""
    store, now = _store(ctx), _now()
    sched = store.with_paused(name, False, now)
    store.log(name, Event.RESUMED, now)
    nxt = _first_pass(store, sched, now)
    doc = {"name": name, "paused": False, **nxt}
    _done(as_json, doc, f"resumed {name}: next run {nxt['next']}")


for _command in (schedule_asked.run, schedule_asked.skip, schedule_asked.backfill):
    schedule.add_command(_command)


@schedule.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def rm(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove a schedule and cancel its waiting occurrence; past tasks stay."""

    store, now = _store(ctx), _now()
    store.read(name)  # NotFound before anything changes
    cancelled = materialise.retire(store, name, now)
    store.remove(name)
    doc = {"name": name, "cancelled": cancelled}
    _done(as_json, doc, f"removed {name}" + "".join(f"; cancelled {t}" for t in cancelled))
