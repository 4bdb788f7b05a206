"""`taskq fence-check`, run from inside a task: does this attempt still hold its claim?"""

from __future__ import annotations

import click

from taskq.cli.common import spool_of
from taskq.cli.params import PlainHelp
from taskq.client import fence
from taskq.errors import BadInput
from taskq.spool.task import check_id
from taskq.times.clock import wall_us


@click.command(cls=PlainHelp, name="fence-check")
@click.option(
    "--id", "task_id", envvar="TASKQ_ID", metavar="ID", help="The task [default: $TASKQ_ID]."
)
@click.option(
    "--fence",
    "token_text",
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
def fence_check_command(
    ctx: click.Context, task_id: str | None, token_text: str | None, host_id: str | None
) -> None:
    """Exit 0 only while the attempt with this fencing token still holds its claim."""
    given = {
        "--id/TASKQ_ID": task_id,
        "--fence/TASKQ_FENCE": token_text,
        "--host-id/TASKQ_HOST": host_id,
    }
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise BadInput(f"fence-check needs {', '.join(missing)}: run it from a task's attempt")
    assert task_id is not None and token_text is not None and host_id is not None
    token = fence.parse(token_text)
    fence.check(spool_of(ctx), check_id(task_id), token, host_id, wall_us())
