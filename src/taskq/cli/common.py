"""What the command modules share: the spool a command acts on, checked, and made."""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO

import click

from taskq.cli import output
from taskq.errors import BadInput, NotFound
from taskq.spool import fsutil
from taskq.spool.layout import Spool


def check_spool_path(ctx: click.Context) -> str:
    """--spool, if it names a directory (or a link to one) or nothing yet; BadInput if not."""
    root: str = ctx.obj["spool"]
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        return root
    except OSError as e:
        raise fsutil.as_taskq_error(e, f"spool {root}") from None
    if not stat.S_ISDIR(mode):
        raise BadInput(f"spool {root} is {fsutil.kind(mode)}, not a directory")
    return root


def spool_of(ctx: click.Context) -> Spool:
    spool = Spool(check_spool_path(ctx))
    spool.warn = lambda message: output.complain(f"warning: {message}")
    return spool


def stdin(what: str) -> BinaryIO:
    """Standard input, for option `what` to read; BadInput if the caller closed it."""
    if sys.stdin is None:
        raise BadInput(f"{what}: standard input is closed")
    return sys.stdin.buffer


def read_stdin(what: str, limit: int) -> bytes:
    """At most limit + 1 bytes of standard input (so that more than limit shows)."""
    try:
        return stdin(what).read(limit + 1)
    except OSError as e:
        raise BadInput(f"{what}: cannot read standard input: {e.strerror}") from None


def existing_spool(ctx: click.Context) -> Spool:
    """The spool of a command that changes it but does not create it: NotFound if none.

    Only submit, schedule add and daemon make a spool (taskq(1), --spool): a mistyped
    --spool must not become a new, empty spool that no daemon serves.
    """
    spool = spool_of(ctx)
    if not os.path.isdir(spool.root):
        raise NotFound(f"no spool at {spool.root} (taskq submit or taskq daemon makes one)")
    init_spool(spool)  # a spool of an older version may lack the directory this one needs
    return spool


def init_spool(spool: Spool) -> None:
    try:
        spool.init()
    except OSError as e:
        raise fsutil.as_taskq_error(e, f"cannot create spool {spool.root}") from None
