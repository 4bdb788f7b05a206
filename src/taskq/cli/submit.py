"""`taskq submit`: accept a command (or a batch of them) to run at a time.

The options become a request (client/request.py) or, with --batch, the
defaults of every line (client/batch.py); the id is printed only once the
task is durable (client/submit.py).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from taskq.cli import output
from taskq.cli.common import init_spool, read_stdin, spool_of, stdin
from taskq.cli.params import (
    DIRECTORY,
    DURATION,
    ENV_VAR,
    FILE,
    POSITIVE_DURATION,
    Count,
    PlainHelp,
    limit_options,
    limits_of,
)
from taskq.client import environment, limits, request
from taskq.client.submit import submit as submit_one
from taskq.client.submit import submit_batch
from taskq.errors import BadInput
from taskq.spool import config
from taskq.spool.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAIL_MODES,
    MAX_AFTER,
    MAX_PRIORITY,
    MAX_STDIN,
    Request,
    TaskBody,
    TaskName,
    check_id,
    check_mutex,
    check_queue,
)
from taskq.times.timespec import format_iso, wall_us

if TYPE_CHECKING:
    from taskq.client.rekey import KeyPolicy


@click.command(cls=PlainHelp, name="submit", context_settings={"ignore_unknown_options": False})
@click.option(
    "--at",
    "at",
    metavar="WHEN",
    help="at(1)-style time (09:00, 9:00 tomorrow, now + 2 hours, noon...), ISO-8601 "
    "(no offset = local time), @EPOCH or now.",
)
@click.option(
    "--in",
    "in_",
    type=DURATION,
    metavar="DURATION",
    help="Run after DURATION, e.g. 90s, 5m, 1h30m.",
)
@click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="Queue name.")
@click.option("--key", help="Idempotency key: a second submit with it creates nothing.")
@click.option(
    "--priority",
    type=Count(-MAX_PRIORITY, MAX_PRIORITY),
    default=0,
    show_default=True,
    metavar="N",
    help="Higher first among the due tasks of its queue (-1000 to 1000).",
)
@click.option(
    "--key-for",
    type=POSITIVE_DURATION,
    metavar="DURATION",
    help="The --key holds for DURATION from this submission, then is free.",
)
@click.option(
    "--on-key",
    type=click.Choice(["keep", "replace"]),
    default="keep",
    show_default=True,
    help="A --key held by a pending task: keep it, or replace that task with this one.",
)
@click.option(
    "--max-attempts",
    type=Count(1, request.MAX_ATTEMPTS),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before the task is dead-lettered to failed/.",
)
@click.option(
    "--timeout",
    type=POSITIVE_DURATION,
    metavar="DURATION",
    help="Kill an attempt that runs longer.",
)
@click.option(
    "--expires",
    type=POSITIVE_DURATION,
    metavar="DURATION",
    help="Fail instead of starting later than run_at + DURATION.",
)
@click.option(
    "--stdin",
    "use_stdin",
    is_flag=True,
    help=f"Store standard input (max {MAX_STDIN} bytes) for the command.",
)
@click.option(
    "--env",
    "env",
    type=ENV_VAR,
    multiple=True,
    metavar="K=V",
    help="Set a variable for the command (repeatable); overrides the recorded one.",
)
@click.option(
    "--no-env",
    is_flag=True,
    help="Record neither the environment nor the umask: the command gets PATH, --env "
    "and the daemon's umask.",
)
@click.option(
    "--cwd",
    metavar="DIRECTORY",
    type=DIRECTORY,
    help="Working directory [default: the current one].",
)
@click.option(
    "--batch",
    metavar="FILE|-",
    type=FILE,
    help="Submit one task per NDJSON line of FILE (- for standard input); "
    "the options above are the defaults for every line.",
)
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="ID[,ID...]",
    help="Wait until these tasks have ended (repeatable), even past run_at.",
)
@click.option(
    "--after-ok/--after-any",
    "after_ok",
    default=True,
    help="Run only if every --after task is done (else cancel), or however they ended.",
)
@click.option(
    "--mail",
    type=click.Choice(MAIL_MODES),
    help="Mail the submitter (or MAILTO) when the task fails, always or never "
    "[default: failure if MAILTO is set, else never].",
)
@click.option(
    "--mutex",
    metavar="NAME",
    help="At most one attempt holding NAME runs at a time, on any daemon of the spool; "
    "the others wait, in run time order.",
)
@limit_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the id.")
@click.argument("command", nargs=-1)
@click.pass_context
def submit_command(ctx: click.Context, /, **opts: Any) -> None:
    """Accept COMMAND to run at a time; print its id once it is durable."""
    with _collector_paused(opts["batch"] is not None):
        _submit(ctx, opts)


@contextlib.contextmanager
def _collector_paused(paused: bool) -> Iterator[None]:
    """Python's cyclic garbage collector off for a batch, and back as it was after.

    A batch's bodies are thousands of objects that live until it ends and
    hold no cycles, and the collector would walk them all again and again
    as they are made: about a tenth of a line's parse (python
    bench/profile_batch.py).
    """
    was = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _submit(ctx: click.Context, opts: dict[str, Any]) -> None:
    now = wall_us()
    opts["after"] = _after_ids(opts["after"])
    if opts["batch"] is None:
        if not opts["command"]:
            raise BadInput("missing COMMAND (or give --batch FILE)")
        bodies = [request.body(_request(opts, now), opts["command"], now)]
    else:
        bodies = _read_batch(opts, now)
    spool = spool_of(ctx)
    policy = _key_policy(opts)
    init_spool(spool)
    if policy is not None and spool.member():
        raise BadInput("--key-for and --on-key replace: not for a member of a shared spool")
    if opts["after"]:
        from taskq.spool import deps  # only for --after: off a plain submit's start-up

        if spool.member():  # one of the member's own, still in the drop, counts
            from taskq.client import member  # a member's submit only

            member.check_known(spool, opts["after"])
        else:
            deps.check_known(spool, opts["after"])
    limits.check(spool, config.load(spool.root).limits, now, adding=len(bodies))
    if any(b.limits is not None for b in bodies):
        from taskq.client import confinable  # reads run/: off a plain submit's start-up path
        from taskq.spool.defaults import default_host_id

        confinable.check(spool, (b.limits for b in bodies), default_host_id(), now)
    if spool.member():  # a shared spool's member: through the drop (client/member.py)
        from taskq.client import member  # a member's submit only

        results = member.submit(spool, bodies)
    elif opts["batch"] is None:
        results = [submit_one(spool, bodies[0], policy=policy)]
    else:
        results = submit_batch(spool, bodies)
    replaced = None if policy is None else policy.replaced
    if replaced is not None:
        output.complain(f"replaced pending task {replaced}")
    if opts["as_json"]:
        import json  # only for --json: off a plain submit's start-up

        docs = (
            {"id": n.id, "created": c, "run_at": format_iso(n.run_at)}
            | ({} if policy is None else {"replaced": replaced})
            for n, c in results
        )
        lines = [json.dumps(doc) for doc in docs]
    else:
        lines = [name.id for name, _ in results]
    if lines:  # (an empty batch accepts nothing and prints nothing)
        output.done("\n".join(lines), _submitted(results))  # one write for a batch's ids


def _submitted(results: list[tuple[TaskName, bool]]) -> str:
    """What a submit did, for standard error when its ids cannot be printed."""
    if len(results) == 1:
        name, created = results[0]
        return f"submitted {name.id}" if created else f"found {name.id} by its key"
    return f"submitted {len(results)} tasks, {results[0][0].id} to {results[-1][0].id}"


def _key_policy(opts: dict[str, Any]) -> KeyPolicy | None:
    """--key-for and --on-key, which need a --key; None when neither is given."""
    if opts["key_for"] is None and opts["on_key"] == "keep":
        return None
    if opts["key"] is None:
        raise BadInput("--key-for and --on-key need --key")
    from taskq.client.rekey import KeyPolicy  # not on the plain submit's start-up path

    return KeyPolicy(window=opts["key_for"], replace=opts["on_key"] == "replace")


def _read_batch(opts: dict[str, Any], now: int) -> list[TaskBody]:
    from taskq.client import batch  # only for --batch: off a plain submit's start-up

    if opts["command"]:
        raise BadInput("give COMMAND or --batch, not both")
    given = (
        ("--key", opts["key"]),
        ("--key-for", opts["key_for"]),
        ("--on-key", None if opts["on_key"] == "keep" else opts["on_key"]),
        ("--stdin", opts["use_stdin"] or None),
        ("--after", opts["after"] or None),
    )
    for option, value in given:
        if value is not None:
            raise BadInput(f"{option} does not go with --batch; give it per line")
    defaults = _request(opts, now)
    try:
        if opts["batch"] == "-":
            return batch.parse(batch.lines(stdin("--batch -")), defaults, now)
        with open(opts["batch"], "rb") as f:
            return batch.parse(batch.lines(f), defaults, now)
    except OSError as e:
        raise BadInput(f"cannot read --batch {opts['batch']}: {e.strerror}") from None


def _request(opts: dict[str, Any], now: int) -> Request:
    """What submit's options ask for: every task's, or a batch's defaults."""
    return Request(
        run_at=request.run_at(opts["at"], opts["in_"], now),
        cwd=request.directory("--cwd", os.path.abspath(opts["cwd"] or os.getcwd())),
        env=request.environment(
            opts["env"], None if opts["no_env"] else environment.record(os.environ)
        ),
        queue=check_queue(opts["queue"]),
        key=opts["key"],
        max_attempts=opts["max_attempts"],
        timeout=opts["timeout"],
        expires=opts["expires"],
        stdin=_read_stdin() if opts["use_stdin"] else None,
        umask=None if opts["no_env"] else environment.umask(),
        env_recorded=not opts["no_env"],
        after=opts["after"],
        after_any=not opts["after_ok"],
        mail=opts["mail"],
        mutex=None if opts["mutex"] is None else check_mutex(opts["mutex"]),
        priority=opts["priority"],
        limits=limits_of(opts),
    )


def _after_ids(values: tuple[str, ...]) -> list[str]:
    """The ids of --after ID[,ID...] (repeatable), checked, each once, in order."""
    ids: list[str] = []
    for value in values:
        for part in value.split(","):
            task_id = check_id(part)
            if task_id not in ids:
                ids.append(task_id)
    if len(ids) > MAX_AFTER:
        raise BadInput(f"--after names {len(ids)} tasks; at most {MAX_AFTER}")
    return ids


def _read_stdin() -> bytes:
    return request.payload("standard input", read_stdin("--stdin", MAX_STDIN))
