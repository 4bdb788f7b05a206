"""`taskq at`, `atq`, `atrm` and `batch`: at(1)'s faces over taskq's spool.

`at` reads a shell job from standard input (or -f FILE), as at(1) does,
and submits it as a task that runs `/bin/sh` with the job on its standard
input, in the submitter's environment, umask and directory, once (no
retries, as at(1) runs a job once). It prints at's two lines on standard
error ("warning: commands will be executed using /bin/sh", "job ID at
DATE") and the id on standard output. `batch` does the same with the
time now, in the `batch` queue, which the daemon's load gate holds until
the load average allows (taskq-daemon(8), --load-limit). `atq` lists and `atrm`
cancels as atq(1) and atrm(1) do. Errors are TaskqErrors, which
cli/main.py turns into a message and an exit status.
"""

from __future__ import annotations

import os
import pwd
from datetime import tzinfo

import click

from taskq.cli import output
from taskq.cli.common import init_spool, read_stdin, spool_of, stdin
from taskq.cli.params import PlainHelp
from taskq.client import environment as submitter
from taskq.client import limits, operations, request
from taskq.client.submit import submit
from taskq.daemon.loadgate import BATCH_QUEUE
from taskq.errors import BadInput, TaskqError
from taskq.spool import config, listing
from taskq.spool.states import State
from taskq.spool.task import DEFAULT_QUEUE, MAX_STDIN, Request, check_queue
from taskq.times import zones
from taskq.times.clock import wall_us
from taskq.times.timespec import parse_compact, us_to_datetime
from taskq.times.when import parse_posix, parse_when

SHELL = "/bin/sh"
CTIME = "%a %b %e %H:%M:%S %Y"  # at(1)'s date: Tue Dec  1 09:42:00 2026
_LISTED = (State.WAITING, State.PENDING, State.CLAIMED, State.RUNNING, State.CANCELLING)
_RUNNING = (State.CLAIMED, State.RUNNING, State.CANCELLING)  # atq shows these in queue "="


def _job_options(default_queue: str) -> list[click.Parameter]:
    return [
        click.Option(
            ["-f", "file"],
            metavar="FILE",
            help="Read the job from FILE instead of standard input.",
        ),
        click.Option(
            ["-m", "mail_always"],
            is_flag=True,
            help="Mail the user when the job has run, even if it succeeded (--mail always).",
        ),
        click.Option(["-M", "mail_never"], is_flag=True, help="Never mail (--mail never)."),
        click.Option(
            ["-q", "queue"],
            metavar="QUEUE",
            default=default_queue,
            show_default=True,
            help="Queue of the job.",
        ),
    ]


@click.command(
    cls=PlainHelp,
    context_settings={"ignore_unknown_options": True},
    params=[
        *_job_options(DEFAULT_QUEUE),
        click.Option(
            ["-t", "posix"],
            metavar="[[CC]YY]MMDDhhmm[.ss]",
            help="Run at this local time, written as for touch -t, instead of TIMESPEC.",
        ),
        click.Argument(["timespec"], nargs=-1),
    ],
)
@click.pass_context
def at_command(
    ctx: click.Context,
    file: str | None,
    mail_always: bool,
    mail_never: bool,
    queue: str,
    posix: str | None,
    timespec: tuple[str, ...],
) -> None:
    """Read a job for /bin/sh and run it at TIMESPEC (now + 1 hour, 4pm tomorrow...)."""
    now = wall_us()
    if posix is not None and timespec:
        raise BadInput("give TIMESPEC or -t TIME, not both")
    if posix is None and not timespec:
        raise BadInput("missing TIMESPEC (e.g. now + 1 hour, 4pm tomorrow) or -t TIME")
    run_at = parse_posix(posix, now) if posix is not None else parse_when(" ".join(timespec), now)
    _queue_job(ctx, run_at, now, file, _mail(mail_always, mail_never), queue)


@click.command(cls=PlainHelp, params=_job_options(BATCH_QUEUE))
@click.pass_context
def batch_command(
    ctx: click.Context, file: str | None, mail_always: bool, mail_never: bool, queue: str
) -> None:
    """Read a job for /bin/sh and run it when the load average allows."""
    now = wall_us()
    _queue_job(ctx, now, now, file, _mail(mail_always, mail_never), queue)


def _mail(always: bool, never: bool) -> str | None:
    if always and never:
        raise BadInput("give -m or -M, not both")
    return "always" if always else "never" if never else None


def _queue_job(
    ctx: click.Context, run_at: int, now: int, file: str | None, mail: str | None, queue: str
) -> None:
    """Submit the job read from file (or standard input); print at's lines and the id."""
    script = _read_job(file)
    job = Request(
        run_at=run_at,
        cwd=request.directory("the working directory", os.getcwd()),
        env=request.environment((), submitter.record(os.environ)),
        queue=check_queue(queue),
        max_attempts=1,
        stdin=script,
        umask=submitter.umask(),
        env_recorded=True,
        mail=mail,
    )
    body = request.body(job, [SHELL], now)
    spool = spool_of(ctx)
    init_spool(spool)
    limits.check(spool, config.load(spool.root).limits, now, adding=1)
    name, _ = submit(spool, body)
    # Submitted: from here nothing may read as "not done" (taskq(1), EXIT STATUS).
    output.complain(f"warning: commands will be executed using {SHELL}", prefix="")
    output.complain(f"job {name.id} at {_ctime(name.run_at, _local())}", prefix="")
    output.done(name.id, f"submitted {name.id}")


def _read_job(file: str | None) -> bytes:
    """The job's text, from file or standard input (prompting 'at> ' on a terminal)."""
    try:
        if file is not None:
            with open(file, "rb") as f:
                data = f.read(MAX_STDIN + 1)
        elif stdin("the job").isatty():
            data = _prompted()
        else:
            data = read_stdin("the job", MAX_STDIN)
    except OSError as e:
        raise BadInput(
            f"cannot read the job from {file or 'standard input'}: {e.strerror}"
        ) from None
    if len(data) > MAX_STDIN:
        raise BadInput(f"the job is over the limit of {MAX_STDIN} bytes")
    return data


def _prompted() -> bytes:
    """Lines typed at a terminal, after at(1)'s 'at> ' prompt, until end of file."""
    lines: list[bytes] = []
    while True:
        output.complain("at> ", prefix="", end="")
        line = stdin("the job").readline()
        if not line:
            output.complain("<EOT>", prefix="")
            return b"".join(lines)
        lines.append(line)


def _local() -> tzinfo:
    return zones.local_zone()


def _ctime(us: int, zone: tzinfo) -> str:
    return us_to_datetime(us).astimezone(zone).strftime(CTIME)


@click.command(
    cls=PlainHelp, params=[click.Option(["-q", "queue"], metavar="QUEUE", help="Only this queue.")]
)
@click.pass_context
def atq_command(ctx: click.Context, queue: str | None) -> None:
    """List jobs not yet ended as atq(1) does: id, time, queue (= running), user."""
    queues = frozenset() if queue is None else frozenset({check_queue(queue)})
    spool = spool_of(ctx)
    rows = sorted(
        listing.rows(spool, listing.Filter(states=_LISTED, queues=queues, bodies=False)),
        key=lambda r: (r.compact, r.id),
    )
    zone, me = _local(), os.geteuid()
    lines = []
    for row in rows:
        owner = _owner(row.path)
        if owner is None or (me != 0 and owner != me):
            continue  # atq shows others' jobs to root only
        shown = "=" if row.state in _RUNNING else row.queue
        when = _ctime(parse_compact(row.compact), zone)
        lines.append(f"{row.id}\t{when} {shown} {_user(owner)}")
    if lines:
        output.write("\n".join(lines))


def _owner(path: str) -> int | None:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None  # ended or moved while listed


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@click.command(cls=PlainHelp)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.pass_context
def atrm_command(ctx: click.Context, ids: tuple[str, ...]) -> None:
    """Remove jobs as atrm(1) does: each is cancelled (a running one is stopped)."""
    spool = spool_of(ctx)
    failed: list[TaskqError] = []
    for task_id in ids:
        try:
            found = operations.cancel(spool, task_id)
        except TaskqError as e:
            failed.append(e)
            continue
        running = found.state in (State.RUNNING, State.CANCELLING)
        output.done(f"{'cancelling' if running else 'cancelled'} {found.name.id}")
    if failed:
        error = TaskqError("; ".join(str(e) for e in failed))
        error.exit_status = failed[0].exit_status  # the first failure's, as for one ID
        raise error
