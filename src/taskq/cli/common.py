"""What the command modules share: the spool a command acts on, checked, and made."""

from __future__ import annotations

import os

import click

from taskq.errors import BadInput
from taskq.spool import fsutil
from taskq.spool.layout import Spool


def spool_of(ctx: click.Context) -> Spool:
    spool = Spool(ctx.obj["spool"])
    if os.path.exists(spool.root) and not os.path.isdir(spool.root):
        raise BadInput(f"spool {ctx.obj['spool']} is not a directory")
    spool.warn = lambda message: click.echo(f"taskq: warning: {message}", err=True)
    return spool


def init_spool(spool: Spool) -> None:
    try:
        spool.init()
    except OSError as e:
        raise fsutil.as_taskq_error(e, f"cannot create spool {spool.root}") from None
