"""`taskq daemon`: the daemon's options, made into its settings, and its start.

Detaching, the pidfile and the log are set up here; the loop itself is
daemon/loop.py.
"""

from __future__ import annotations

import os
import sys
from typing import Any

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
from taskq.daemon.settings import Settings
from taskq.errors import BadInput, TaskqError
from taskq.spool import fsutil
from taskq.spool.defaults import default_host_id
from taskq.spool.layout import Spool
from taskq.spool.task import check_token
from taskq.times.timespec import parse_duration


@click.command(cls=PlainHelp, name="daemon")
@click.option(
    "--workers",
    type=Count(1, 4096),
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
@click.option(
    "--load-interval",
    default="60s",
    show_default=True,
    metavar="DURATION",
    type=DURATION,
    help="Least time between two starts in a load-gated queue, as atd -b.",
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
    type=OUTPUT_FILE,
    help="Write the pid to FILE and hold FILE.lock: a second daemon with it refuses to start.",
)
@click.option(
    "--log-file",
    metavar="FILE",
    type=OUTPUT_FILE,
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
@click.pass_context
def daemon_command(ctx: click.Context, /, **opts: Any) -> None:
    """Run due tasks until SIGTERM or SIGINT (in the foreground unless --detach)."""
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
        load_limits=_load_limits(opts["load_limit"]),
        load_interval=opts["load_interval"],
        keep_done=None if opts["keep_done"] == "never" else parse_duration(opts["keep_done"]),
        metrics_file=_metrics_file(opts["metrics_file"]),
        metrics_listen=opts["metrics_listen"],
    )
    cfg.check()
    spool = Spool(check_spool_path(ctx))  # what it skips goes to its log
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
