"""The taskq command line: parse arguments, call the core, format the output.

This is the one place where errors become a message and an exit status
(see the EXIT STATUS table in taskq(1)).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, TypeVar

import click

# Imports used by one command only are made inside it: `taskq submit` starts
# as a new process for every task, and its start-up time is its throughput.
from taskq import __version__, errors
from taskq.cli.params import (
    DIRECTORY,
    DURATION,
    ENV_VAR,
    FILE,
    LISTEN,
    POSITIVE_DURATION,
    QUEUE_LIMIT,
    PlainGroup,
)
from taskq.client import environment as submitter
from taskq.client import request
from taskq.errors import BadInput, Conflict, NotFound, TaskqError, WaitTimeout
from taskq.spool import fsutil
from taskq.spool.defaults import default_host_id, default_spool
from taskq.spool.layout import STATES, Spool
from taskq.spool.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAIL_MODES,
    MAX_AFTER,
    MAX_STDIN,
    TaskBody,
    check_id,
    check_queue,
    check_token,
)
from taskq.times.clock import wall_us
from taskq.times.timespec import SECOND, format_iso, parse_duration, parse_when


def _spool(ctx: click.Context) -> Spool:
    spool = Spool(ctx.obj["spool"])
    if os.path.exists(spool.root) and not os.path.isdir(spool.root):
        raise BadInput(f"spool {ctx.obj['spool']} is not a directory")
    spool.warn = lambda message: click.echo(f"taskq: warning: {message}", err=True)
    return spool


class _Group(PlainGroup):
    """taskq's commands; `schedule`'s are imported only when asked for (start-up time)."""

    LAZY: ClassVar[dict[str, str]] = {"schedule": "taskq.cli.schedule"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            import importlib

            self.add_command(getattr(importlib.import_module(self.LAZY[cmd_name]), cmd_name))
        return super().get_command(ctx, cmd_name)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """--version, as click.version_option prints it (which costs start-up time to build)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"taskq, version {__version__}")
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--spool",
    envvar="TASKQ_SPOOL",
    metavar="DIR",
    help="Spool directory [env: TASKQ_SPOOL; default: /var/spool/taskq for root, "
    "else ${XDG_STATE_HOME:-~/.local/state}/taskq].",
)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and exit.",
)
@click.pass_context
def cli(ctx: click.Context, spool: str | None) -> None:
    """taskq: run commands at a given time, durably, to the millisecond."""
    ctx.obj = {"spool": spool or default_spool()}


# -- submit ----------------------------------------------------------------


@cli.command(context_settings={"ignore_unknown_options": False})
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
    "--max-attempts",
    type=click.IntRange(1, request.MAX_ATTEMPTS),
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
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the id.")
@click.argument("command", nargs=-1)
@click.pass_context
def submit(ctx: click.Context, /, **opts: Any) -> None:
    """Accept COMMAND to run at a time; print its id once it is durable."""
    from taskq.client import limits
    from taskq.client.submit import submit as submit_one
    from taskq.client.submit import submit_batch
    from taskq.spool import config

    now = wall_us()
    opts["after"] = _after_ids(opts["after"])
    if opts["batch"] is None:
        if not opts["command"]:
            raise BadInput("missing COMMAND (or give --batch FILE)")
        bodies = [_request(opts, now).body(opts["command"], now)]
    else:
        bodies = _read_batch(opts, now)
    spool = _spool(ctx)
    _init(spool)
    if opts["after"]:
        from taskq.spool import deps

        deps.check_known(spool, opts["after"])
    limits.check(spool, config.load(spool.root).limits, now, adding=len(bodies))
    if opts["batch"] is None:
        results = [submit_one(spool, bodies[0])]
    else:
        results = submit_batch(spool, bodies)
    if opts["as_json"]:
        docs = ({"id": n.id, "created": c, "run_at": format_iso(n.run_at)} for n, c in results)
        lines = [json.dumps(doc) for doc in docs]
    else:
        lines = [name.id for name, _ in results]
    click.echo("\n".join(lines))  # one write for a batch's ids, not one per line


def _read_batch(opts: dict[str, Any], now: int) -> list[TaskBody]:
    from taskq.client import batch

    if opts["command"]:
        raise BadInput("give COMMAND or --batch, not both")
    given = (
        ("--key", opts["key"]),
        ("--stdin", opts["use_stdin"] or None),
        ("--after", opts["after"] or None),
    )
    for option, value in given:
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
    return batch.parse(data, _request(opts, now), now)


def _request(opts: dict[str, Any], now: int) -> request.Request:
    """What submit's options ask for: every task's, or a batch's defaults."""
    return request.Request(
        run_at=request.run_at(opts["at"], opts["in_"], now),
        cwd=request.directory("--cwd", os.path.abspath(opts["cwd"] or os.getcwd())),
        env=request.environment(
            opts["env"], None if opts["no_env"] else submitter.record(os.environ)
        ),
        queue=check_queue(opts["queue"]),
        key=opts["key"],
        max_attempts=opts["max_attempts"],
        timeout=opts["timeout"],
        expires=opts["expires"],
        stdin=_read_stdin() if opts["use_stdin"] else None,
        umask=None if opts["no_env"] else submitter.umask(),
        env_recorded=not opts["no_env"],
        after=opts["after"],
        after_any=not opts["after_ok"],
        mail=opts["mail"],
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
    return request.payload("standard input", sys.stdin.buffer.read(MAX_STDIN + 1))


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
    type=POSITIVE_DURATION,
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
    type=DURATION,
    help="Backoff before the first retry; doubles each attempt, with jitter.",
)
@click.option(
    "--retry-cap",
    default="1h",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="Longest backoff.",
)
@click.option(
    "--rescan",
    default="30s",
    show_default=True,
    metavar="DURATION",
    type=POSITIVE_DURATION,
    help="Safety-net rescan interval.",
)
@click.option(
    "--clock-margin",
    default="1ms",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="Clock uncertainty allowed for: never start before run_at + margin.",
)
@click.option(
    "--queue-limit",
    "queue_limit",
    type=QUEUE_LIMIT,
    multiple=True,
    metavar="NAME=N",
    help="Run at most N attempts of queue NAME at once (repeatable).",
)
@click.option(
    "--doorbell-poll",
    default="250ms",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="How often to stat the doorbell for other hosts' submissions; 0 turns it off.",
)
@click.option(
    "--max-uncertainty",
    default="2s",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="Stop dispatching while the clock uncertainty exceeds this.",
)
@click.option(
    "--clock-check",
    default="10s",
    show_default=True,
    metavar="DURATION",
    type=POSITIVE_DURATION,
    help="How often to measure the clock against the spool filesystem's.",
)
@click.option(
    "--kill-grace",
    default="10s",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
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
    type=FILE,
    help="Write the pid to FILE and hold FILE.lock: a second daemon with it refuses to start.",
)
@click.option(
    "--log-file",
    metavar="FILE",
    type=FILE,
    help="Append log lines to FILE (SIGHUP reopens it) instead of stderr.",
)
@click.option(
    "--shutdown-grace",
    default="10s",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="How long SIGTERM waits for running attempts.",
)
@click.option(
    "--metrics-file",
    metavar="FILE",
    type=FILE,
    help="Write Prometheus metrics to FILE every few seconds (a node_exporter textfile).",
)
@click.option(
    "--metrics-listen",
    metavar="ADDRESS:PORT",
    type=LISTEN,
    help="Also serve the metrics over HTTP, e.g. 127.0.0.1:9464 (no authentication).",
)
@click.pass_context
def daemon(ctx: click.Context, /, **opts: Any) -> None:
    """Run due tasks until SIGTERM or SIGINT (in the foreground unless --detach)."""
    from taskq.daemon import logsetup
    from taskq.daemon.detach import PidFile, detach
    from taskq.daemon.loop import Daemon
    from taskq.daemon.settings import Settings

    cfg = Settings(
        workers=opts["workers"],
        lease=opts["lease"],
        host_id=check_token("host id", opts["host_id"] or default_host_id()),
        retry_delay=opts["retry_delay"],
        retry_cap=opts["retry_cap"],
        rescan=opts["rescan"],
        doorbell_poll=opts["doorbell_poll"],
        clock_margin=opts["clock_margin"],
        max_uncertainty=opts["max_uncertainty"],
        clock_check=opts["clock_check"],
        kill_grace=opts["kill_grace"],
        shutdown_grace=opts["shutdown_grace"],
        queue_limits=_queue_limits(opts["queue_limit"]),
        keep_done=None if opts["keep_done"] == "never" else parse_duration(opts["keep_done"]),
        metrics_file=_metrics_file(opts["metrics_file"]),
        metrics_listen=opts["metrics_listen"],
    )
    cfg.check()
    spool = Spool(ctx.obj["spool"])  # what it skips goes to its log
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


def _queue_limits(pairs: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return dict(pairs)  # checked by params.QUEUE_LIMIT; the last of a name wins


def _metrics_file(path: str | None) -> str | None:
    """--metrics-file as an absolute path in a directory we may write (--detach chdirs to /)."""
    if path is None:
        return None
    full = os.path.abspath(path)
    directory = os.path.dirname(full)
    if not os.path.isdir(directory):
        raise BadInput(f"--metrics-file {path}: no directory {directory}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInput(f"--metrics-file {path}: cannot write in {directory}")
    return full


# -- reading -----------------------------------------------------------------


_Command = TypeVar("_Command", bound=Callable[..., Any])


def _time_format(command: _Command) -> _Command:
    """The --local/--utc option of a command that prints instants."""
    return click.option(
        "--local/--utc",
        "local",
        default=None,
        help="Print times as local time with its offset, or as UTC "
        "[default: TASKQ_TIMEFMT, else utc]; --json is always UTC.",
    )(command)


def _stamp(local: bool | None) -> Callable[[int], str]:
    """How this command prints instants (zones.stamp); the zone is read only for --local."""
    from taskq.times import zones

    return zones.stamp(local, os.environ)


@cli.command(name="ls")
@click.option(
    "--state",
    type=click.Choice(STATES),
    multiple=True,
    help="Only tasks in this state (repeatable).",
)
@click.option("--queue", "queues", multiple=True, help="Only tasks in this queue (repeatable).")
@click.option("--after", metavar="WHEN", help="Only tasks due at or after WHEN.")
@click.option("--before", metavar="WHEN", help="Only tasks due before WHEN.")
@click.option("--key", help="Only the task submitted with this idempotency key.")
@click.option("--limit", type=click.IntRange(1), metavar="N", help="Stop after N tasks.")
@click.option(
    "--no-command",
    "names_only",
    is_flag=True,
    help="Leave the command out: read file names only, no task file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line (NDJSON).")
@_time_format
@click.pass_context
def ls_(
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
    from taskq.cli import lspool
    from taskq.spool import listing

    now = wall_us()
    flt = listing.Filter(
        states=tuple(s for s in STATES if s in state) if state else STATES,
        queues=frozenset(check_queue(q) for q in queues),
        after=None if after is None else _when("--after", after, now),
        before=None if before is None else _when("--before", before, now),
        limit=limit,
        bodies=not names_only,
    )
    spool = _spool(ctx)
    lines = lspool.Lines(as_json, not names_only, local)
    _stamp(local)  # a bad TASKQ_TIMEFMT is refused before anything is listed

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        if key is None:
            lspool.write_jobs(spool, flt, lines, write)
        else:
            lspool.write_rows(listing.by_key(spool, key, flt), flt, lines, write)
    except BrokenPipeError:  # `taskq ls | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _when(option: str, text: str, now: int) -> int:
    try:
        return parse_when(text, now)
    except BadInput as e:
        raise BadInput(f"{option}: {e}") from None


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option(
    "--env", "env", is_flag=True, help="Print the task's variables (NAME=VALUE a line), only."
)
@_time_format
@click.pass_context
def show(ctx: click.Context, task_id: str, as_json: bool, env: bool, local: bool | None) -> None:
    """Show a task: its request, recorded environment, state and every attempt."""
    from taskq.cli.render import describe, detail, env_lines
    from taskq.spool import journal

    stamp = _stamp(local)
    spool = _spool(ctx)
    found, body = spool.load(task_id)
    if env:
        click.echo(json.dumps(body.env, indent=1) if as_json else env_lines(body.env))
        return
    doc = detail(found, body, journal.read(spool.log_dir(found.name.id)))
    if body.after:
        from taskq.spool import deps

        states = deps.states_of(spool, body.after)
        doc["after"] = [{"id": i, "state": states.get(i, "gone")} for i in body.after]
    click.echo(json.dumps(doc, indent=1) if as_json else describe(doc, stamp))


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
    from taskq.client import operations

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
@_time_format
@click.pass_context
def status(ctx: click.Context, as_json: bool, local: bool | None) -> None:
    """Show the daemons on this spool: dispatching or not, clock uncertainty, load."""
    from taskq.spool import rundir as health

    stamp = _stamp(local)
    run_dir = _spool(ctx).run
    records = health.read_all(run_dir)
    for r in records:
        r["alive"] = health.record_alive(run_dir, r, default_host_id(), wall_us())
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    from taskq.cli.render import daemon_line, paused_line
    from taskq.spool import pause as pausing

    for r in records:
        click.echo(daemon_line(r, stamp))
    for held in pausing.active(_spool(ctx), wall_us()):
        click.echo(paused_line(held.to_doc()))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@_time_format
@click.pass_context
def stats(ctx: click.Context, as_json: bool, local: bool | None) -> None:
    """Counts per state and queue, the overdue backlog, lateness and daemons."""
    from taskq.observe import stats as report

    stamp = _stamp(local)
    doc = report.collect(_spool(ctx), wall_us(), default_host_id())
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    from taskq.cli.render import stats_text

    click.echo(stats_text(doc, stamp))


@cli.command()
@click.option(
    "--older-than",
    type=DURATION,
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Remove done/ days that ended longer ago than this.",
)
@click.option("--dry-run", is_flag=True, help="Report what would go; change nothing.")
@click.pass_context
def gc(ctx: click.Context, older_than: int, dry_run: bool) -> None:
    """Prune finished tasks from done/, with their logs and keys."""
    from taskq.spool import retention

    found = retention.collect(_spool(ctx), wall_us(), older_than, dry_run)
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
    from taskq.spool import fsck as checker

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
    ctx.exit(errors.fsck_status(report.problems, report.fixed))


# -- changing tasks --------------------------------------------------------


@cli.command()
@click.argument("task_id", metavar="ID")
@click.pass_context
def cancel(ctx: click.Context, task_id: str) -> None:
    """Cancel a task: pending and claimed ones never start, a running one is stopped."""
    from taskq.client import operations

    found = operations.cancel(_spool(ctx), task_id)
    if found.state in ("running", "cancelling"):
        click.echo(f"cancelling {found.name.id} (running: its daemon stops it, TERM then KILL)")
    else:
        click.echo(f"cancelled {found.name.id}")


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="The new run time.")
@click.option("--in", "in_", type=DURATION, metavar="DURATION", help="The new run time, from now.")
@_time_format
@click.pass_context
def reschedule(
    ctx: click.Context, task_id: str, at: str | None, in_: int | None, local: bool | None
) -> None:
    """Move a pending task to another run time (a claim racing it wins or loses whole)."""
    from taskq.client import operations

    if at is None and in_ is None:
        raise BadInput("give --at WHEN or --in DURATION")
    stamp = _stamp(local)
    name = operations.reschedule(_spool(ctx), task_id, request.run_at(at, in_, wall_us()))
    click.echo(f"rescheduled {name.id} to {stamp(name.run_at)}")


@cli.command()
@click.argument("task_id", metavar="ID")
@click.option("--at", "at", metavar="WHEN", help="Run the new attempt then [default: now].")
@click.option(
    "--in", "in_", type=DURATION, metavar="DURATION", help="Run the new attempt after DURATION."
)
@_time_format
@click.pass_context
def retry(
    ctx: click.Context, task_id: str, at: str | None, in_: int | None, local: bool | None
) -> None:
    """Move a failed task back to pending, with a fresh budget of attempts."""
    from taskq.client import operations

    stamp = _stamp(local)
    name = operations.retry(_spool(ctx), task_id, request.run_at(at, in_, wall_us()))
    click.echo(f"retrying {name.id} as attempt {name.attempt} at {stamp(name.run_at)}")


@cli.command()
@click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
@click.option(
    "--timeout", type=DURATION, metavar="DURATION", help="Give up after DURATION (exit 124)."
)
@click.pass_context
def wait(ctx: click.Context, task_ids: tuple[str, ...], timeout: int | None) -> None:
    """Wait until the tasks end; print how each ended; exit as the EXIT STATUS table says."""
    from taskq.client import operations

    spool = _spool(ctx)
    seconds = None if timeout is None else timeout / SECOND
    results = []
    for found in operations.wait(spool, list(task_ids), seconds):
        how, status = operations.outcome(spool, found)
        results.append((how, status))
        shown = f" (exit status {status})" if how == "failed" and status is not None else ""
        click.echo(f"{found.name.id} {how}{shown}")
    if len(results) < len(set(check_id(t) for t in task_ids)):
        raise WaitTimeout("wait timed out")
    ctx.exit(errors.wait_status(results))


@cli.command()
@click.argument("queues", metavar="QUEUE...", nargs=-1, required=True)
@click.option(
    "--until",
    metavar="WHEN",
    help="Resume by itself at WHEN (a time as for submit --at) [default: when resumed].",
)
@click.pass_context
def pause(ctx: click.Context, queues: tuple[str, ...], until: str | None) -> None:
    """Stop starting the queues' tasks, on every daemon, until resumed (or --until)."""
    from taskq.spool import pause as pausing

    now = wall_us()
    when = None if until is None else request.run_at(until, None, now, ("--until", "--until"))
    if when is not None and when <= now:
        raise BadInput(f"--until {until} is not in the future")
    names = [check_queue(q) for q in queues]
    spool = _spool(ctx)
    _init(spool)
    for held in pausing.pause(spool, names, when, now):
        shown = "until resumed" if held.until is None else f"until {format_iso(held.until)}"
        click.echo(f"paused {held.queue} {shown}")


@cli.command()
@click.argument("queues", metavar="QUEUE...", nargs=-1, required=True)
@click.pass_context
def resume(ctx: click.Context, queues: tuple[str, ...]) -> None:
    """Start the queues' tasks again; they drain through the usual fair scheduling."""
    from taskq.spool import pause as pausing

    names = [check_queue(q) for q in queues]
    pausing.resume(_spool(ctx), names)
    for name in names:
        click.echo(f"resumed {name}")


# -- inside a task -----------------------------------------------------------


@cli.command(name="fence-check")
@click.option(
    "--id", "task_id", envvar="TASKQ_ID", metavar="ID", help="The task [default: $TASKQ_ID]."
)
@click.option(
    "--fence",
    envvar="TASKQ_FENCE",
    metavar="TOKEN",
    help="The attempt's fencing token [default: $TASKQ_FENCE].",
)
@click.option(
    "--host-id",
    envvar="TASKQ_HOST",
    metavar="ID",
    help="The host id of the attempt's daemon [default: $TASKQ_HOST].",
)
@click.pass_context
def fence_check(
    ctx: click.Context, task_id: str | None, fence: str | None, host_id: str | None
) -> None:
    """Exit 0 only while the attempt with this fencing token still holds its claim."""
    from taskq.client import fence as fencing

    given = {
        "--id/TASKQ_ID": task_id,
        "--fence/TASKQ_FENCE": fence,
        "--host-id/TASKQ_HOST": host_id,
    }
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise BadInput(f"fence-check needs {', '.join(missing)}: run it from a task's attempt")
    assert task_id is not None and fence is not None and host_id is not None
    token = fencing.parse(fence)
    fencing.check(_spool(ctx), check_id(task_id), token, host_id, wall_us())


# -- schedule: its own module, taskq.cli_schedule, imported when asked for (_Group)


# -- entry point -------------------------------------------------------------


def main() -> NoReturn:
    """Run the CLI and exit with its status."""
    sys.exit(_run())


def _run() -> int:
    """Run the CLI; map every error to one line on stderr and return the exit status."""
    try:
        status = cli.main(prog_name="taskq", standalone_mode=False)  # or ctx.exit's status
    except click.Abort:
        click.echo("taskq: aborted", err=True)
        return errors.EX_FAILURE
    except click.ClickException as e:
        click.echo(f"taskq: {e.format_message()}", err=True)
        value_error = isinstance(e, click.BadParameter)  # one line names the option
        if isinstance(e, click.UsageError) and e.ctx is not None and not value_error:
            click.echo(f"Try '{e.ctx.command_path} --help' for help.", err=True)
        return e.exit_code
    except TaskqError as e:
        click.echo(f"taskq: {e}", err=True)
        return e.exit_status
    except OSError as e:
        err = fsutil.as_taskq_error(e, str(e.filename or "I/O error"))
        click.echo(f"taskq: {err}", err=True)
        return err.exit_status
    return status if isinstance(status, int) else errors.EX_OK
