"""`taskq daemon`: the daemon's options, made into its settings, and its start.

Detaching, the pidfile and the log are set up here; the loop itself is
daemon/loop.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from taskq.cli.common import check_spool_path, init_spool
from taskq.cli.params import (
    DURATION,
    LISTEN,
    LOAD_LIMIT,
    OUTPUT_FILE,
    POSITIVE_DURATION,
    QUEUE_LIMIT,
    Count,
    PlainHelp,
)
from taskq.daemon import logsetup
from taskq.daemon.detach import PidFile, detach
from taskq.daemon.loadgate import DEFAULT_LIMITS
from taskq.daemon.loop import Daemon
from taskq.daemon.settings import CGROUP_MODES, DURATIONS, KEEP_DONE, WORKERS, Settings
from taskq.errors import BadInput, TaskqError
from taskq.spool import fsutil, mounts
from taskq.spool.defaults import default_host_id
from taskq.spool.layout import Spool
from taskq.spool.task import check_token
from taskq.times.timespec import parse_duration

F = TypeVar("F", bound=Callable[..., Any])


def _duration(name: str) -> Callable[[F], F]:
    """The click option of a duration setting, made from its one source (settings.DURATIONS)."""
    knob = DURATIONS[name]
    return click.option(
        "--" + name.replace("_", "-"),
        default=knob.default,
        show_default=True,
        metavar="DURATION",
        type=POSITIVE_DURATION if knob.least > 0 and not knob.off else DURATION,
        help=knob.help,
    )


@click.command(cls=PlainHelp, name="daemon")
@click.option(
    "--workers",
    type=Count(WORKERS[1], WORKERS[2]),
    default=WORKERS[0],
    show_default=True,
    help="Attempts run at once.",
)
@_duration("lease")
@click.option(
    "--host-id", metavar="ID", help="This daemon's host id in claims [default: the hostname]."
)
@_duration("retry_delay")
@_duration("retry_cap")
@_duration("rescan")
@click.option(
    "--clock-margin",
    metavar="DURATION",
    type=DURATION,
    help=DURATIONS["clock_margin"].help
    + f" [default: {DURATIONS['clock_margin'].default}; 0 on a local filesystem, whose "
    "clock is this host's]",
)
@click.option(
    "--queue-limit",
    "queue_limit",
    type=QUEUE_LIMIT,
    multiple=True,
    metavar="NAME=N",
    help="Run at most N attempts of queue NAME at once, across every daemon of the spool "
    "(repeatable; over config.toml's [queues.NAME] limit).",
)
@click.option(
    "--load-limit",
    "load_limit",
    type=LOAD_LIMIT,
    multiple=True,
    metavar="NAME=LOAD",
    help="Start queue NAME's attempts only while the load average is below LOAD, as atd -l "
    "does batch jobs (repeatable; batch=1.5 unless given; NAME=off ungates).",
)
@_duration("load_interval")
@_duration("doorbell_poll")
@_duration("max_uncertainty")
@_duration("clock_check")
@_duration("kill_grace")
@click.option(
    "--keep-done",
    default=KEEP_DONE,
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
    type=OUTPUT_FILE,
    help="Write the pid to FILE and hold FILE.lock: a second daemon with it refuses to start.",
)
@click.option(
    "--log-file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Append log lines to FILE (SIGHUP reopens it) instead of stderr.",
)
@_duration("shutdown_grace")
@click.option(
    "--metrics-file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Write Prometheus metrics to FILE (named *.prom) every few seconds (a node_exporter "
    "textfile).",
)
@click.option(
    "--metrics-listen",
    metavar="ADDRESS:PORT",
    type=LISTEN,
    help="Also serve the metrics over HTTP, e.g. 127.0.0.1:9464 (no authentication).",
)
@click.option(
    "--cgroups",
    type=click.Choice(CGROUP_MODES),
    default=CGROUP_MODES[0],
    show_default=True,
    help="Where attempts with resource limits get their cgroups: the better of v2 (delegated) "
    "and v1, only one, or none (such tasks are refused).",
)
@click.pass_context
def daemon_command(ctx: click.Context, /, **opts: Any) -> None:
    """Run due tasks until SIGTERM or SIGINT (in the foreground unless --detach)."""
    root = check_spool_path(ctx)
    opts["clock_margin"] = _clock_margin(opts["clock_margin"], root)
    cfg = Settings(
        workers=opts["workers"],
        host_id=check_token("host id", opts["host_id"] or default_host_id()),
        **{name: opts[name] for name in DURATIONS},
        queue_limits=_queue_limits(opts["queue_limit"]),
        load_limits=_load_limits(opts["load_limit"]),
        keep_done=None if opts["keep_done"] == "never" else parse_duration(opts["keep_done"]),
        metrics_file=_metrics_file(opts["metrics_file"]),
        metrics_listen=opts["metrics_listen"],
        cgroups=opts["cgroups"],
    )
    cfg.check()
    spool = Spool(root)  # what it skips goes to its log
    init_spool(spool)
    log_file = os.path.abspath(opts["log_file"]) if opts["log_file"] else None
    syslog = opts["detach"] and log_file is None
    if syslog and not os.path.exists("/dev/log"):
        raise BadInput("--detach needs --log-file here: there is no /dev/log for syslog")
    if log_file is not None:
        logsetup.check_log_file(log_file)
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


def _clock_margin(given: int | None, root: str) -> int:
    """--clock-margin, or by default none where the spool's file times are our own clock."""
    if given is not None:
        return given
    return 0 if mounts.clock_stamped_here(root) else DURATIONS["clock_margin"].us


def _queue_limits(pairs: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return dict(pairs)  # checked by params.QUEUE_LIMIT; the last of a name wins


def _load_limits(pairs: tuple[tuple[str, float | None], ...]) -> dict[str, float]:
    """The load gates: the default ones, then the options' (the last of a name wins)."""
    limits: dict[str, float | None] = {**DEFAULT_LIMITS, **dict(pairs)}
    return {name: load for name, load in limits.items() if load is not None}


def _metrics_file(path: str | None) -> str | None:
    """--metrics-file as an absolute path in a directory we may write (--detach chdirs to /)."""
    if path is None:
        return None
    full = os.path.abspath(path)
    if not full.endswith(".prom"):  # node_exporter's textfile collector reads no other name
        raise BadInput(f"--metrics-file {path}: the name must end in .prom")
    directory = os.path.dirname(full)
    if not os.path.isdir(directory):
        raise BadInput(f"--metrics-file {path}: no directory {directory}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInput(f"--metrics-file {path}: cannot write in {directory}")
    return full
