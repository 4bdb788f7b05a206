"""Commands on tasks: ls, show, logs and wait read them; cancel, reschedule, retry change them."""

from __future__ import annotations

import errno
import functools
import json
from collections.abc import Callable
from typing import Any

import click

from taskq import errors
from taskq.cli import lspool, output
from taskq.cli.common import spool_of
from taskq.cli.params import DURATION, POSITIVE_DURATION, Count, PlainHelp
from taskq.cli.render import describe, detail, env_lines
from taskq.cli.timefmt import stamper, time_format, when_of
from taskq.client import member, operations, request
from taskq.errors import BadInput, Conflict, NotFound, Unprinted, WaitTimeout
from taskq.observe import watch
from taskq.spool import attemptfiles, byid, deps, journal, listing
from taskq.spool.drop import Request
from taskq.spool.layout import Spool
from taskq.spool.states import STATES, State
from taskq.spool.task import TaskName, check_id, check_queue
from taskq.times.clock import wall_us
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when


@click.command(cls=PlainHelp, name="ls")
@click.option(
    "--state",
    type=click.Choice([s.value for s in STATES]),
    multiple=True,
    help="Only tasks in this state (repeatable).",
)
@click.option("--queue", "queues", multiple=True, help="Only tasks in this queue (repeatable).")
@click.option("--after", metavar="WHEN", help="Only tasks due at or after WHEN.")
@click.option("--before", metavar="WHEN", help="Only tasks due before WHEN.")
@click.option("--key", help="Only the task submitted with this idempotency key.")
@click.option("--limit", type=Count(1), metavar="N", help="Stop after N tasks.")
@click.option(
    "--no-command",
    "names_only",
    is_flag=True,
    help="Leave the command out: read file names only, no task file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line (NDJSON).")
@time_format
@click.pass_context
def ls_command(
    ctx: click.Context,
    state: tuple[str, ...],
    queues: tuple[str, ...],
    after: str | None,
    before: str | None,
    key: str | None,
    limit: int | None,
    names_only: bool,
    as_json: bool,
    local: bool | None,
) -> None:
    """List tasks as they are read, one line each, by state then run_at."""
    now = wall_us()
    flt = listing.Filter(
        states=tuple(s for s in STATES if s in state) if state else STATES,
        queues=frozenset(check_queue(q) for q in queues),
        after=None if after is None else when_of("--after", after, now),
        before=None if before is None else when_of("--before", before, now),
        limit=limit,
        bodies=not names_only,
    )
    spool = spool_of(ctx)
    lines = lspool.Lines(as_json, not names_only, local)
    stamper(local)  # a bad TASKQ_TIMEFMT is refused before anything is listed

    def write(text: str) -> None:
        output.write(text, end="")

    try:
        if key is None:
            lspool.write_jobs(spool, flt, lines, write)
        else:
            lspool.write_rows(listing.by_key(spool, key, flt), flt, lines, write)
    except Unprinted as e:
        if e.errno != errno.EPIPE:
            raise
        # `taskq ls | head`: the reader has all it wants


@click.command(cls=PlainHelp, name="show")
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option(
    "--env", "env", is_flag=True, help="Print the task's variables (NAME=VALUE a line), only."
)
@time_format
@click.pass_context
def show_command(
    ctx: click.Context, task_id: str, as_json: bool, env: bool, local: bool | None
) -> None:
    """Show a task: its request, recorded environment, state and every attempt."""
    stamp = stamper(local)
    spool = spool_of(ctx)
    try:
        found, body = byid.load(spool, task_id)
    except NotFound:
        if not spool.member():
            raise
        doc = member.unfiled(spool, check_id(task_id))
        if doc is None:
            doc = {"status": 0, "id": task_id}  # filed since the first look: look again
        if doc.get("state") == "submitted":  # in the drop still: no daemon took it in yet
            text = f"id:        {doc['id']}\nstate:     submitted (waiting in drop/ for a daemon)"
            output.write(json.dumps(doc, indent=1) if as_json else text)
            return
        found, body = byid.load(spool, str(member.answered(doc)["id"]))  # its key's task
    if env:
        output.write(json.dumps(body.env, indent=1) if as_json else env_lines(body.env))
        return
    doc = detail(found, body, journal.read(spool.log_dir(found.name.id)))
    if body.after:
        states = deps.states_of(spool, body.after)
        doc["after"] = [{"id": i, "state": states.get(i, "gone")} for i in body.after]
    output.write(json.dumps(doc, indent=1) if as_json else describe(doc, stamp))


@click.command(cls=PlainHelp, name="logs")
@click.argument("task_id", metavar="ID")
@click.option("--attempt", type=Count(1), help="Which attempt [default: the latest with output].")
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing output as it comes, until the attempt ends."
)
@click.pass_context
def logs_command(ctx: click.Context, task_id: str, attempt: int | None, follow: bool) -> None:
    """Print the output (stdout and stderr) of an attempt."""
    spool = spool_of(ctx)
    log_dir = spool.log_dir(task_id)

    write = output.write_bytes
    if follow:
        watch.follow(spool, task_id, attempt, write)
        return
    if attempt is None:
        attempt = watch.latest_attempt(log_dir)
        while attempt is not None and attemptfiles.never_began(log_dir, attempt):
            attempt = attempt - 1 or None  # made ahead of a start that never came
        if attempt is None:
            byid.locate(spool, task_id)
            raise Conflict(f"task {check_id(task_id)} has not run yet")
    try:
        offset = 0
        while data := attemptfiles.read_output(log_dir, attempt, offset):
            write(data)
            offset += len(data)
    except FileNotFoundError:
        byid.locate(spool, task_id)
        raise Conflict(f"task {check_id(task_id)} has no output for attempt {attempt}") from None


def _asks(function: Callable[..., None]) -> Callable[..., None]:
    """The --timeout of a change that a member of a shared spool asks a daemon for."""
    return click.option(
        "--timeout",
        "ask_timeout",
        type=POSITIVE_DURATION,
        default="10s",
        show_default=True,
        metavar="DURATION",
        help="In a shared spool, how long a member waits for a daemon to take the request.",
    )(function)


def _ask(spool: Spool, request: Request, timeout: int) -> dict[str, Any]:
    return member.ask(spool, request, timeout / SECOND)


@click.command(cls=PlainHelp, name="cancel")
@click.argument("task_id", metavar="ID")
@_asks
@click.pass_context
def cancel_command(ctx: click.Context, task_id: str, ask_timeout: int) -> None:
    """Cancel a task: pending and claimed ones never start, a running one is stopped."""
    spool = spool_of(ctx)
    if spool.member():
        doc = _ask(spool, Request("cancel", check_id(task_id)), ask_timeout)
        state, task_id = str(doc["state"]), str(doc["id"])
    else:
        found = operations.cancel(spool, task_id)
        state, task_id = found.state, found.name.id
    if state in (State.RUNNING, State.CANCELLING):
        text = f"cancelling {task_id} (running: its daemon stops it, TERM then KILL)"
        output.done(text, f"cancelling {task_id} (running)")
    else:
        output.done(f"cancelled {task_id}")


@click.command(cls=PlainHelp, name="reschedule")
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="The new run time.")
@click.option("--in", "in_", type=DURATION, metavar="DURATION", help="The new run time, from now.")
@time_format
@_asks
@click.pass_context
def reschedule_command(
    ctx: click.Context,
    task_id: str,
    at: str | None,
    in_: int | None,
    local: bool | None,
    ask_timeout: int,
) -> None:
    """Move a pending task to another run time (a claim racing it wins or loses whole)."""
    if at is None and in_ is None:
        raise BadInput("give --at WHEN or --in DURATION")
    stamp = stamper(local)
    spool, run_at = spool_of(ctx), request.run_at(at, in_, wall_us())
    if spool.member():
        doc = _ask(spool, Request("reschedule", check_id(task_id), run_at), ask_timeout)
        name = _named(doc)
    else:
        name = operations.reschedule(spool, task_id, run_at)
    output.done(f"rescheduled {name.id} to {stamp(name.run_at)}")


def _named(doc: dict[str, Any]) -> TaskName:
    """The task name a daemon's answer gives (its id, run time and attempt)."""
    return TaskName(parse_when(str(doc["run_at"]), 0), str(doc["id"]), int(doc["attempt"]))


@click.command(cls=PlainHelp, name="retry")
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="Run the new attempt then [default: now].")
@click.option(
    "--in", "in_", type=DURATION, metavar="DURATION", help="Run the new attempt after DURATION."
)
@time_format
@_asks
@click.pass_context
def retry_command(
    ctx: click.Context,
    task_id: str,
    at: str | None,
    in_: int | None,
    local: bool | None,
    ask_timeout: int,
) -> None:
    """Move a failed task back to pending, with a fresh budget of attempts."""
    stamp = stamper(local)
    spool, run_at = spool_of(ctx), request.run_at(at, in_, wall_us())
    if spool.member():
        name = _named(_ask(spool, Request("retry", check_id(task_id), run_at), ask_timeout))
    else:
        name = operations.retry(spool, task_id, run_at)
    output.done(f"retrying {name.id} as attempt {name.attempt} at {stamp(name.run_at)}")


@click.command(cls=PlainHelp, name="wait")
@click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
@click.option(
    "--timeout", type=DURATION, metavar="DURATION", help="Give up after DURATION (exit 124)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object a line per task.")
@click.pass_context
def wait_command(
    ctx: click.Context, task_ids: tuple[str, ...], timeout: int | None, as_json: bool
) -> None:
    """Wait until the tasks end; print how each ended; exit as the EXIT STATUS table says."""
    spool = spool_of(ctx)
    seconds = None if timeout is None else timeout / SECOND
    if spool.shared():  # what is still in the drop is waited for there first, by anyone
        locate = functools.partial(byid.locate, spool)
        task_ids = tuple(member.settle(spool, t, locate, seconds).name.id for t in task_ids)
    results: list[tuple[str, int | None]] = []
    for found in watch.wait(spool, list(task_ids), seconds):
        if isinstance(found, watch.Gone):  # it will never end: quarantined, or removed
            results.append(("gone", None))
            gone = {"id": found.id, "outcome": "gone", "exit_status": None, "why": found.why}
            output.done(json.dumps(gone) if as_json else f"{found.id} gone ({found.why})")
            continue
        how, status = watch.outcome(spool, found)
        results.append((how, status))
        if as_json:  # the exit status says it, printed or not
            output.done(json.dumps({"id": found.name.id, "outcome": how, "exit_status": status}))
            continue
        shown = f" (exit status {status})" if how == State.FAILED and status is not None else ""
        output.done(f"{found.name.id} {how}{shown}")  # the exit status says it, printed or not
    if len(results) < len(set(check_id(t) for t in task_ids)):
        raise WaitTimeout("wait timed out")
    ctx.exit(errors.wait_status(results))
