"""How a command prints instants: the --local/--utc option, the stamp, and reading WHEN options."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from taskq.errors import BadInput
from taskq.times import zones
from taskq.times.when import parse_when

_Command = TypeVar("_Command", bound=Callable[..., Any])


def time_format(command: _Command) -> _Command:
    """The --local/--utc option of a command that prints instants."""
    return click.option(
        "--local/--utc",
        "local",
        default=None,
        help="Print times as local time with its offset, or as UTC "
        "[default: TASKQ_TIMEFMT, else utc]; --json is always UTC.",
    )(command)


def stamper(local: bool | None) -> Callable[[int], str]:
    """How this command prints instants (zones.stamp); the zone is read only for --local."""
    return zones.stamp(local, os.environ)


def when_of(option: str, text: str, now: int) -> int:
    try:
        return parse_when(text, now)
    except BadInput as e:
        raise BadInput(f"{option}: {e}") from None
