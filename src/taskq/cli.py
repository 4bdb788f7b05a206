"""The taskq command line: parse arguments, call the core, format the output.

This is the one place where errors become a message and an exit status
(see the EXIT STATUS table in taskq(1)).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

# Imports used by one command only are made inside it: `taskq submit` starts
# as a new process for every task, and its start-up time is its throughput.
from taskq import __version__, fsutil
from taskq.clock import wall_us
from taskq.config import default_host_id, default_spool
from taskq.errors import BadInput, Conflict, NotFound, TaskqError
from taskq.spool import STATES, Located, Spool
from taskq.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PATH,
    DEFAULT_QUEUE,
    MAX_STDIN,
    TaskBody,
    check_id,
    check_queue,
    check_token,
    new_id,
)
from taskq.timespec import format_iso, parse_duration, parse_when

F = TypeVar("F", bound=Callable[..., Any])
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _spool(ctx: click.Context) -> Spool:
    return Spool(ctx.obj["spool"])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--spool",
    envvar="TASKQ_SPOOL",
    type=click.Path(file_okay=False),
    help="Spool directory [env: TASKQ_SPOOL; default: /var/spool/taskq for root, "
    "else ${XDG_STATE_HOME:-~/.local/state}/taskq].",
)
@click.version_option(__version__, "-V", "--version", prog_name="taskq")
@click.pass_context
def cli(ctx: click.Context, spool: str | None) -> None:
    """taskq: run commands at a given time, durably, to the millisecond."""
    ctx.obj = {"spool": spool or default_spool()}


# -- submit ----------------------------------------------------------------


@cli.command(context_settings={"ignore_unknown_options": False})
@click.option("--at", "at", metavar="WHEN", help="ISO-8601 time (no offset = UTC), @EPOCH or now.")
@click.option("--in", "in_", metavar="DURATION", help="Run after DURATION, e.g. 90s, 5m, 1h30m.")
@click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="Queue name.")
@click.option("--key", help="Idempotency key: a second submit with it creates nothing.")
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 1000),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before the task is dead-lettered to failed/.",
)
@click.option("--timeout", metavar="DURATION", help="Kill an attempt that runs longer.")
@click.option(
    "--expires", metavar="DURATION", help="Fail instead of starting later than run_at + DURATION."
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
    multiple=True,
    metavar="K=V",
    help="Set a variable for the command (repeatable).",
)
@click.option(
    "--cwd", type=click.Path(file_okay=False), help="Working directory [default: the current one]."
)
@click.option(
    "--batch",
    metavar="FILE|-",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Submit one task per NDJSON line of FILE (- for standard input); "
    "the options above are the defaults for every line.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the id.")
@click.argument("command", nargs=-1)
@click.pass_context
def submit(ctx: click.Context, /, **opts: Any) -> None:
    """Accept COMMAND to run at a time; print its id once it is durable."""
    from taskq import limits
    from taskq.submit import submit as submit_one
    from taskq.submit import submit_batch

    now = wall_us()
    if opts["batch"] is None:
        if not opts["command"]:
            raise BadInput("missing COMMAND (or give --batch FILE)")
        bodies = [_build_body(opts, now)]
    else:
        bodies = _read_batch(opts, now)
    spool = _spool(ctx)
    _init(spool)
    limits.check(spool, limits.load(spool), now, adding=len(bodies))
    if opts["batch"] is None:
        results = [submit_one(spool, bodies[0])]
    else:
        results = submit_batch(spool, bodies)
    for name, created in results:
        if opts["as_json"]:
            doc = {"id": name.id, "created": created, "run_at": format_iso(name.run_at)}
            click.echo(json.dumps(doc))
        else:
            click.echo(name.id)


def _read_batch(opts: dict[str, Any], now: int) -> list[TaskBody]:
    from taskq import batch

    if opts["command"]:
        raise BadInput("give COMMAND or --batch, not both")
    for option, value in (("--key", opts["key"]), ("--stdin", opts["use_stdin"] or None)):
        if value is not None:
            raise BadInput(f"{option} does not go with --batch; give it per line")
    try:
        if opts["batch"] == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(opts["batch"], "rb") as f:
                data = f.read()
    except OSError as e:
        raise BadInput(f"cannot read --batch {opts['batch']}: {e.strerror}") from None
    return batch.parse(data, _build_body({**opts, "command": ("-",)}, now), now)


def _build_body(opts: dict[str, Any], now: int) -> TaskBody:
    if opts["at"] is not None and opts["in_"] is not None:
        raise BadInput("give --at or --in, not both")
    run_at = now
    if opts["at"] is not None:
        run_at = parse_when(opts["at"], now)
    elif opts["in_"] is not None:
        run_at = now + parse_duration(opts["in_"])
    return TaskBody(
        id=new_id(now),
        argv=list(opts["command"]),
        run_at=run_at,
        submitted_at=now,
        cwd=_cwd(opts["cwd"]),
        env=_env(opts["env"]),
        queue=check_queue(opts["queue"]),
        key=opts["key"],
        max_attempts=opts["max_attempts"],
        timeout=_positive_duration("--timeout", opts["timeout"]),
        expires=_positive_duration("--expires", opts["expires"]),
        stdin=_read_stdin() if opts["use_stdin"] else None,
    )


def _cwd(given: str | None) -> str:
    path = os.path.abspath(given or os.getcwd())
    if not os.path.isdir(path):
        raise BadInput(f"--cwd {given!r} is not a directory")
    return path


def _env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise BadInput(f"bad --env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def _positive_duration(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    value = parse_duration(text)
    if value <= 0:
        raise BadInput(f"{option} must be longer than zero")
    return value


def _read_stdin() -> bytes:
    data = sys.stdin.buffer.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise BadInput(f"standard input is over the limit of {MAX_STDIN} bytes")
    return data


def _init(spool: Spool) -> None:
    try:
        spool.init()
    except OSError as e:
        raise fsutil.as_taskq_error(e, f"cannot create spool {spool.root}") from None


# -- daemon ----------------------------------------------------------------


@cli.command()
@click.option(
    "--workers",
    type=click.IntRange(1, 4096),
    default=8,
    show_default=True,
    help="Attempts run at once.",
)
@click.option(
    "--lease",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="Lease of a claim; renewed every third of it.",
)
@click.option(
    "--host-id", metavar="ID", help="This daemon's host id in claims [default: the hostname]."
)
@click.option(
    "--retry-delay",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="Backoff before the first retry; doubles each attempt, with jitter.",
)
@click.option(
    "--retry-cap", default="1h", show_default=True, metavar="DURATION", help="Longest backoff."
)
@click.option(
    "--rescan",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Safety-net rescan interval.",
)
@click.option(
    "--clock-margin",
    default="1ms",
    show_default=True,
    metavar="DURATION",
    help="Clock uncertainty allowed for: never start before run_at + margin.",
)
@click.option(
    "--queue-limit",
    "queue_limit",
    multiple=True,
    metavar="NAME=N",
    help="Run at most N attempts of queue NAME at once (repeatable).",
)
@click.option(
    "--max-uncertainty",
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="Stop dispatching while the clock uncertainty exceeds this.",
)
@click.option(
    "--clock-check",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="How often to measure the clock against the spool filesystem's.",
)
@click.option(
    "--kill-grace",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="Between SIGTERM and SIGKILL on --timeout.",
)
@click.option(
    "--keep-done",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Prune done/ days older than this (hourly), as taskq gc does; 'never' keeps all.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Run in the background (double fork, new session); log to --log-file or syslog.",
)
@click.option(
    "--pidfile",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Write the pid to FILE and hold FILE.lock: a second daemon with it refuses to start.",
)
@click.option(
    "--log-file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Append log lines to FILE (SIGHUP reopens it) instead of stderr.",
)
@click.option(
    "--shutdown-grace",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="How long SIGTERM waits for running attempts.",
)
@click.pass_context
def daemon(ctx: click.Context, /, **opts: Any) -> None:
    """Run due tasks until SIGTERM or SIGINT (in the foreground unless --detach)."""
    from taskq import logsetup
    from taskq.daemon import Config, Daemon
    from taskq.detach import PidFile, detach

    cfg = Config(
        workers=opts["workers"],
        lease=_positive_duration("--lease", opts["lease"]) or 0,
        host_id=check_token("host id", opts["host_id"] or default_host_id()),
        retry_delay=parse_duration(opts["retry_delay"]),
        retry_cap=parse_duration(opts["retry_cap"]),
        rescan=_positive_duration("--rescan", opts["rescan"]) or 0,
        clock_margin=parse_duration(opts["clock_margin"]),
        max_uncertainty=parse_duration(opts["max_uncertainty"]),
        clock_check=_positive_duration("--clock-check", opts["clock_check"]) or 0,
        kill_grace=parse_duration(opts["kill_grace"]),
        shutdown_grace=parse_duration(opts["shutdown_grace"]),
        queue_limits=_queue_limits(opts["queue_limit"]),
        keep_done=None if opts["keep_done"] == "never" else parse_duration(opts["keep_done"]),
    )
    spool = _spool(ctx)
    _init(spool)
    log_file = os.path.abspath(opts["log_file"]) if opts["log_file"] else None
    syslog = opts["detach"] and log_file is None
    if syslog and not os.path.exists("/dev/log"):
        raise BadInput("--detach needs --log-file here: there is no /dev/log for syslog")
    pidfile = PidFile(opts["pidfile"]) if opts["pidfile"] else None
    if pidfile is not None:
        pidfile.check()  # refuse in the foreground, where the message is seen
    if opts["detach"]:
        detach()
    handler = logsetup.setup(log_file, syslog)
    try:
        if pidfile is not None:
            pidfile.acquire()
        status = Daemon(spool, cfg, on_hup=lambda: logsetup.reopen(handler)).run()
    except (TaskqError, OSError) as e:
        # Detached, stderr is /dev/null: the log is the only place an error
        # shows. In the foreground the log line is the one-line message.
        logsetup.fatal(e)
        err = e if isinstance(e, TaskqError) else fsutil.as_taskq_error(e, "taskq daemon")
        sys.exit(err.exit_status)
    except Exception as e:
        logsetup.fatal(e)
        raise
    finally:
        if pidfile is not None:
            pidfile.release()
    sys.exit(status)


def _queue_limits(pairs: tuple[str, ...]) -> dict[str, int]:
    limits = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise BadInput(f"bad --queue-limit {pair!r}: expected NAME=N with N >= 1")
        limits[check_queue(name)] = int(value)
    return limits


# -- reading -----------------------------------------------------------------


def _body_or_none(spool: Spool, found: Located) -> TaskBody | None:
    try:
        return spool.read_body(found.path)
    except (TaskqError, OSError):
        return None


@cli.command(name="ls")
@click.option(
    "--state",
    type=click.Choice(STATES),
    multiple=True,
    help="Only tasks in this state (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def ls_(ctx: click.Context, state: tuple[str, ...], as_json: bool) -> None:
    """List tasks, one line each, by state then run_at."""
    from taskq.render import summary, table

    spool = _spool(ctx)
    rows = []
    for st in state or STATES:
        for found in spool.iter_state(st):
            rows.append(summary(found, _body_or_none(spool, found)))
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    elif rows:
        click.echo(table(rows))


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show a task: its request, state and every attempt."""
    from taskq.render import describe, detail

    spool = _spool(ctx)
    found, body = spool.load(task_id)
    from taskq import journal

    doc = detail(found, body, journal.read(spool.log_dir(found.name.id)))
    click.echo(json.dumps(doc, indent=1) if as_json else describe(doc))


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option(
    "--attempt", type=click.IntRange(1), help="Which attempt [default: the latest with output]."
)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing output as it comes, until the attempt ends."
)
@click.pass_context
def logs(ctx: click.Context, task_id: str, attempt: int | None, follow: bool) -> None:
    """Print the output (stdout and stderr) of an attempt."""
    from taskq import operations

    spool = _spool(ctx)
    log_dir = spool.log_dir(task_id)

    def write(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    if follow:
        operations.follow(spool, task_id, attempt, write)
        return
    if attempt is None:
        attempt = operations.latest_attempt(log_dir)
        if attempt is None:
            spool.locate(task_id)
            raise Conflict(f"task {check_id(task_id)} has not run yet")
    try:
        with open(os.path.join(log_dir, f"{attempt}.out"), "rb") as f:
            write(f.read())
    except FileNotFoundError:
        spool.locate(task_id)
        raise Conflict(f"task {check_id(task_id)} has no output for attempt {attempt}") from None


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the daemons on this spool: dispatching or not, clock uncertainty, load."""
    from taskq import status as health

    run_dir = _spool(ctx).run
    records = health.read_all(run_dir)
    for r in records:
        r["alive"] = health.record_alive(run_dir, r, default_host_id(), wall_us())
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    from taskq.render import daemon_line

    for r in records:
        click.echo(daemon_line(r))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts per state and queue, the overdue backlog, lateness and daemons."""
    from taskq import stats as report

    doc = report.collect(_spool(ctx), wall_us(), default_host_id())
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    from taskq.render import stats_text

    click.echo(stats_text(doc))


@cli.command()
@click.option(
    "--older-than",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Remove done/ days that ended longer ago than this.",
)
@click.option("--dry-run", is_flag=True, help="Report what would go; change nothing.")
@click.pass_context
def gc(ctx: click.Context, older_than: str, dry_run: bool) -> None:
    """Prune finished tasks from done/, with their logs and keys."""
    from taskq import gc as retention

    found = retention.collect(_spool(ctx), wall_us(), parse_duration(older_than), dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {found.tasks} done task(s) in {found.days} day(s), with their logs "
        f"and {found.keys} key(s)"
    )


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what is wrong; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def fsck(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Check the spool's structure and permissions; quarantine and repair what is bad."""
    from taskq import fsck as checker

    spool = _spool(ctx)
    if not os.path.isdir(spool.root):
        raise NotFound(f"no spool at {spool.root}")
    report = checker.check(spool, wall_us(), dry_run)
    if as_json:
        doc = {"problems": report.problems, "fixed": report.fixed, "findings": report.lines}
        click.echo(json.dumps(doc, indent=1))
    else:
        for line in report.lines:
            click.echo(line)
        click.echo(f"fsck: {report.problems} problem(s), {report.fixed} fixed")
    sys.exit(0 if report.problems == report.fixed else 1)


# -- changing tasks --------------------------------------------------------


@cli.command()
@click.argument("task_id", metavar="ID")
@click.pass_context
def cancel(ctx: click.Context, task_id: str) -> None:
    """Cancel a task: pending and claimed ones never start, a running one is stopped."""
    from taskq import operations

    found = operations.cancel(_spool(ctx), task_id)
    if found.state in ("running", "cancelling"):
        click.echo(f"cancelling {found.name.id} (running: its daemon stops it, TERM then KILL)")
    else:
        click.echo(f"cancelled {found.name.id}")


def _when(at: str | None, in_: str | None, now: int) -> int:
    if at is not None and in_ is not None:
        raise BadInput("give --at or --in, not both")
    if at is not None:
        return parse_when(at, now)
    if in_ is not None:
        return now + parse_duration(in_)
    return now


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="The new run time.")
@click.option("--in", "in_", metavar="DURATION", help="The new run time, from now.")
@click.pass_context
def reschedule(ctx: click.Context, task_id: str, at: str | None, in_: str | None) -> None:
    """Move a pending task to another run time (a claim racing it wins or loses whole)."""
    from taskq import operations

    if at is None and in_ is None:
        raise BadInput("give --at WHEN or --in DURATION")
    name = operations.reschedule(_spool(ctx), task_id, _when(at, in_, wall_us()))
    click.echo(f"rescheduled {name.id} to {format_iso(name.run_at)}")


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="Run the new attempt then [default: now].")
@click.option("--in", "in_", metavar="DURATION", help="Run the new attempt after DURATION.")
@click.pass_context
def retry(ctx: click.Context, task_id: str, at: str | None, in_: str | None) -> None:
    """Move a failed task back to pending, with a fresh budget of attempts."""
    from taskq import operations

    name = operations.retry(_spool(ctx), task_id, _when(at, in_, wall_us()))
    click.echo(f"retrying {name.id} as attempt {name.attempt} at {format_iso(name.run_at)}")


@cli.command()
@click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--timeout", metavar="DURATION", help="Give up after DURATION (exit 124).")
@click.pass_context
def wait(ctx: click.Context, task_ids: tuple[str, ...], timeout: str | None) -> None:
    """Wait until the tasks end; print how each ended; exit as the EXIT STATUS table says."""
    from taskq import operations
    from taskq.errors import EX_CANCELLED, EX_EXPIRED, EX_WAIT_TIMEOUT

    spool = _spool(ctx)
    seconds = None if timeout is None else parse_duration(timeout) / 1e6
    results = []
    for found in operations.wait(spool, list(task_ids), seconds):
        how, status = operations.outcome(spool, found)
        results.append((how, status))
        shown = f" (exit status {status})" if how == "failed" and status is not None else ""
        click.echo(f"{found.name.id} {how}{shown}")
    if len(results) < len(set(check_id(t) for t in task_ids)):
        click.echo("taskq: wait timed out", err=True)
        sys.exit(EX_WAIT_TIMEOUT)
    if len(results) == 1:
        how, status = results[0]
        codes = {"done": 0, "cancelled": EX_CANCELLED, "expired": EX_EXPIRED}
        sys.exit(codes.get(how, status or 1))
    sys.exit(0 if all(how == "done" for how, _ in results) else 1)


# -- entry point -------------------------------------------------------------


def main() -> NoReturn:
    """Run the CLI; map every error to one line on stderr and an exit status."""
    try:
        cli.main(prog_name="taskq", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("taskq: aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        click.echo(f"taskq: {e.format_message()}", err=True)
        if isinstance(e, click.UsageError) and e.ctx is not None:
            click.echo(f"Try '{e.ctx.command_path} --help' for help.", err=True)
        sys.exit(e.exit_code)
    except TaskqError as e:
        click.echo(f"taskq: {e}", err=True)
        sys.exit(e.exit_status)
    except OSError as e:
        err = fsutil.as_taskq_error(e, str(e.filename or "I/O error"))
        click.echo(f"taskq: {err}", err=True)
        sys.exit(err.exit_status)
    sys.exit(0)
