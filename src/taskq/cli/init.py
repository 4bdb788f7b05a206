"""`taskq init`: make a spool, private, or shared by the members of a group."""

from __future__ import annotations

import click

from taskq.cli import output
from taskq.cli.common import init_spool
from taskq.cli.params import PlainHelp
from taskq.spool import sharing
from taskq.spool.layout import Spool


@click.command(cls=PlainHelp, name="init")
@click.option(
    "--shared",
    "group",
    metavar="GROUP",
    help="Share the spool with GROUP's members (as root): they write in drop/ only.",
)
@click.argument("directory", metavar="[SPOOL]", required=False)
@click.pass_context
def init_command(ctx: click.Context, group: str | None, directory: str | None) -> None:
    """Make a spool: private to its owner, or shared with a group (made so, or converted)."""
    spool = Spool(directory or ctx.obj["spool"])
    if group is None:
        init_spool(spool)
        if spool.shared():
            output.done(f"spool {spool.root} is shared (it has drop/); left so")
        else:
            output.done(f"private spool {spool.root}")
        return
    gid = sharing.group_id(group)
    for line in sharing.share(spool, gid):
        output.done(line)
    output.done(f"shared spool {spool.root} with group {group}: members submit through drop/")
