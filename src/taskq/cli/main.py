"""The taskq command line: the `taskq` group, its commands loaded when asked for, exit statuses.

Each command group lives in a module of its own (submit, daemon, tasks,
queues, admin, fence_check, schedule, at) and is imported only when that
command runs: `taskq submit` starts as a new process for every task, and
what it imports is its start-up time (tests/e2e/test_submit.py states the
budget). This is the one place where errors become a message and an exit
status (see the EXIT STATUS table in taskq(1)).
"""

from __future__ import annotations

import importlib
import sys
from typing import ClassVar, NoReturn

import click

from taskq import __version__, errors
from taskq.cli import output
from taskq.cli.params import PlainGroup
from taskq.errors import TaskqError
from taskq.spool import fsutil
from taskq.spool.defaults import default_spool


class _Group(PlainGroup):
    """taskq's commands, each imported from its module only when asked for."""

    COMMANDS: ClassVar[dict[str, tuple[str, str]]] = {
        "submit": ("taskq.cli.submit", "submit_command"),
        "daemon": ("taskq.cli.daemon", "daemon_command"),
        "ls": ("taskq.cli.tasks", "ls_command"),
        "show": ("taskq.cli.tasks", "show_command"),
        "logs": ("taskq.cli.tasks", "logs_command"),
        "cancel": ("taskq.cli.tasks", "cancel_command"),
        "reschedule": ("taskq.cli.tasks", "reschedule_command"),
        "retry": ("taskq.cli.tasks", "retry_command"),
        "wait": ("taskq.cli.tasks", "wait_command"),
        "pause": ("taskq.cli.queues", "pause_command"),
        "resume": ("taskq.cli.queues", "resume_command"),
        "status": ("taskq.cli.admin", "status_command"),
        "stats": ("taskq.cli.admin", "stats_command"),
        "gc": ("taskq.cli.admin", "gc_command"),
        "fsck": ("taskq.cli.admin", "fsck_command"),
        "init": ("taskq.cli.init", "init_command"),
        "fence-check": ("taskq.cli.fence_check", "fence_check_command"),
        "schedule": ("taskq.cli.schedule", "schedule"),
        "top": ("taskq.cli.topapp", "top_command"),
        "at": ("taskq.cli.at", "at_command"),
        "atq": ("taskq.cli.at", "atq_command"),
        "atrm": ("taskq.cli.at", "atrm_command"),
        "batch": ("taskq.cli.at", "batch_command"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.COMMANDS and cmd_name not in self.commands:
            module, attr = self.COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """--version, as click.version_option prints it (which costs start-up time to build)."""
    if value and not ctx.resilient_parsing:
        output.write(f"taskq, version {__version__}")
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


def main() -> NoReturn:
    """Run the CLI and exit with its status."""
    output.hold_stdio()
    sys.exit(_run())


def _run() -> int:
    """Run the CLI; map every error to one line on stderr and return the exit status."""
    try:
        status = cli.main(prog_name="taskq", standalone_mode=False)  # or ctx.exit's status
    except click.Abort:
        output.complain("aborted")
        return errors.EX_FAILURE
    except click.ClickException as e:
        value_error = isinstance(e, click.BadParameter)  # one line names the option
        if isinstance(e, click.UsageError) and e.ctx is not None and not value_error:
            output.complain(f"{e.format_message()}\nTry '{e.ctx.command_path} --help' for help.")
        else:
            output.complain(e.format_message())
        return e.exit_code
    except TaskqError as e:
        output.complain(str(e))
        return e.exit_status
    except OSError as e:
        err = fsutil.as_taskq_error(e, str(e.filename or "I/O error"))
        output.complain(str(err))
        return err.exit_status
    return status if isinstance(status, int) else errors.EX_OK
