"""Click parameter types for taskq's option values: durations, NAME=VALUE pairs, addresses.

Each converts the text of one option and, when it is bad, fails with a
one-line message that names the option (exit status 2); the rules
themselves are request.py's, task.py's and timespec.py's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from taskq.cli import output
from taskq.client import request
from taskq.errors import BadInput
from taskq.spool import fields, fsutil, resources
from taskq.spool.resources import Resources
from taskq.spool.task import check_queue
from taskq.times.timespec import parse_duration


class OptionError(click.BadParameter):
    """A bad option value; its message names the option, and is the whole report."""

    def format_message(self) -> str:
        return self.message


if TYPE_CHECKING:  # click 8.4 made ParamType generic; older ones cannot subscript it
    _ParamType = click.ParamType[Any]
else:
    _ParamType = click.ParamType


class _Type(_ParamType):
    """A parameter type whose failures are OptionErrors."""

    def fail(
        self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None
    ) -> NoReturn:
        raise OptionError(message, ctx, param)


def _option(param: click.Parameter | None) -> str:
    """The name to show for a parameter: its longest, e.g. --timeout."""
    return max(param.opts, key=len) if param is not None and param.opts else "value"


class Duration(_Type):
    """DURATION (90, 90s, 250ms, 5m, 2h, 1d, 1h30m) as microseconds."""

    name = "duration"

    def __init__(self, positive: bool = False) -> None:
        self.positive = positive  # refuse zero

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value  # converted already
        try:
            us = parse_duration(str(value))
        except BadInput as e:
            self.fail(f"{_option(param)}: {e}", param, ctx)
        try:
            return request.positive(_option(param), us) if self.positive else us
        except BadInput as e:
            self.fail(str(e), param, ctx)


class Count(_Type):
    """A whole number in a range, in ASCII digits (int() takes fullwidth ones; shells do not)."""

    name = "integer"

    def __init__(self, least: int = 1, most: int | None = None) -> None:
        self.least, self.most = least, most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value  # a default, or converted already
        text = str(value).strip()
        sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
        number = sign * int(digits) if digits.isascii() and digits.isdigit() else None
        if number is None or number < self.least or (self.most is not None and number > self.most):
            top = "" if self.most is None else f" to {self.most}"
            self.fail(f"{_option(param)}: {value!r} is not a whole number from {self.least}{top}")
        return number


class EnvVar(_Type):
    """NAME=VALUE, a variable for the command, as a (name, value) pair."""

    name = "NAME=VALUE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        name, sep, text = str(value).partition("=")
        if not sep or not fields.env_name(name):
            self.fail(f"bad {_option(param)} {value!r}: expected NAME=VALUE", param, ctx)
        return name, text


class QueueLimit(_Type):
    """NAME=N, at most N attempts of queue NAME at once, as a (name, N) pair."""

    name = "NAME=N"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        name, sep, text = str(value).partition("=")
        if not sep or not (text.isascii() and text.isdigit()) or int(text) < 1:
            self.fail(f"bad {_option(param)} {value!r}: expected NAME=N with N >= 1", param, ctx)
        try:
            return check_queue(name), int(text)
        except BadInput as e:
            self.fail(f"{_option(param)}: {e}", param, ctx)


class LoadLimit(_Type):
    """NAME=LOAD, gate queue NAME at a 1-minute load average of LOAD, or NAME=off (no gate)."""

    name = "NAME=LOAD"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, float | None]:
        if isinstance(value, tuple):
            return value
        name, sep, text = str(value).partition("=")
        try:
            load = None if text == "off" else float(text)
        except ValueError:
            load = -1.0
        if not sep or (load is not None and not 0 < load <= MAX_LOAD):
            self.fail(
                f"bad {_option(param)} {value!r}: expected NAME=LOAD with 0 < LOAD <= "
                f"{MAX_LOAD:g}, or NAME=off",
                param,
                ctx,
            )
        try:
            return check_queue(name), load
        except BadInput as e:
            self.fail(f"{_option(param)}: {e}", param, ctx)


MAX_LOAD = 1e6  # a load average no host reaches: finite, so a gate is a number


class Listen(_Type):
    """ADDRESS:PORT to listen on, as (address, port); [ADDRESS]:PORT for IPv6."""

    name = "ADDRESS:PORT"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        addr, sep, port = str(value).rpartition(":")
        bracketed = addr.startswith("[") and addr.endswith("]")
        addr = addr[1:-1] if bracketed else addr
        ambiguous = ":" in addr and not bracketed  # ::1:0 is an address, or ::1 and port 0
        bad_port = not (port.isascii() and port.isdigit()) or int(port) > 65535
        if not sep or not addr or ambiguous or bad_port:
            self.fail(
                f"bad {_option(param)} {value!r}: expected ADDRESS:PORT, e.g. 127.0.0.1:9464 "
                "or [::1]:9464",
                param,
                ctx,
            )
        return addr, int(port)


DURATION = Duration()
POSITIVE_DURATION = Duration(positive=True)
ENV_VAR = EnvVar()
QUEUE_LIMIT = QueueLimit()
LOAD_LIMIT = LoadLimit()
LISTEN = Listen()


class _FileName(_Type):
    """A file's name, checked only to be no directory when it exists (as click.Path checks).

    click.Path asks gettext for its name when it is made, and gettext imports
    locale, which submit's path must not (tests/e2e/test_submit.py's budget).
    """

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value != "-" and os.path.isdir(value):
            self.fail(f"{_option(param)}: {value!r} is a directory", param, ctx)
        return value


class _OutputFile(_Type):
    """A file the daemon writes outside the spool (--pidfile, --log-file, --metrics-file).

    Refused when something but a regular file stands at the name (a device,
    a FIFO, a socket, a directory, a symbolic link: `--pidfile /dev/null`
    must never replace /dev/null), or when its directory does not exist.
    The daemon checks again when it writes (fsutil.open_append, PidFile).
    """

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        found = fsutil.not_regular(value)
        if found is not None:
            self.fail(f"{_option(param)} {value}: {found}, not a regular file", param, ctx)
        directory = os.path.dirname(os.path.abspath(value))
        if not os.path.isdir(directory):
            self.fail(f"{_option(param)} {value}: no directory {directory}", param, ctx)
        return value


class _DirectoryName(_Type):
    """A directory's name, passed on as given: the command checks it (request.directory)."""

    name = "directory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


FILE = _FileName()
OUTPUT_FILE = _OutputFile()
DIRECTORY = _DirectoryName()


def _show_help(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        output.write(ctx.get_help())
        ctx.exit()


class PlainHelp(click.Command):
    """A command whose -h/--help option says its text without gettext.

    click builds the help option of every command it parses, and asks
    gettext for "Show this message and exit."; gettext then imports locale
    and looks for message catalogues, which submit's path must not
    (tests/e2e/test_submit.py's import budget).
    """

    _plain_help: click.Option | None = None

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        names = self.get_help_option_names(ctx)
        if not names or not self.add_help_option:
            return None
        if self._plain_help is None:  # one object: click orders callbacks by identity
            self._plain_help = click.Option(
                [*names, "taskq_help"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_show_help,
                help="Show this message and exit.",
            )
        return self._plain_help


class PlainGroup(PlainHelp, click.Group):
    """A group of PlainHelp commands, itself one."""

    command_class = PlainHelp
    group_class = type  # its groups are of its own class


F = TypeVar("F", bound=Callable[..., Any])


def limit_options(command: F) -> F:
    """--memory-max, --cpu-weight, --cpu-max and --tasks-max (submit, schedule add)."""
    for option in reversed(_LIMIT_OPTIONS):
        command = option(command)
    return command


_LIMIT_OPTIONS = [
    click.option(
        "--memory-max",
        metavar="SIZE",
        help="Run each attempt in a cgroup of its own, with at most SIZE of memory and swap "
        "(512M, 2G); past it the kernel's OOM killer ends it.",
    ),
    click.option(
        "--cpu-weight",
        metavar="N",
        help="Each attempt's share of contended CPU, 1 to 10000 (100: as much as any other).",
    ),
    click.option(
        "--cpu-max",
        metavar="PERCENT",
        help="Each attempt uses at most PERCENT of one CPU (50%, 200% for two CPUs).",
    ),
    click.option(
        "--tasks-max",
        metavar="N",
        help="Each attempt's command runs at most N processes and threads at once.",
    ),
]


def limits_of(opts: dict[str, Any]) -> Resources | None:
    """The limits those options ask for, checked (spool/resources.py); None if none is given."""
    given: dict[str, object] = {n: opts[n] for n in resources.NAMES if opts[n] is not None}
    if not given:
        return None
    for name in ("cpu_weight", "tasks_max"):  # counts as numbers; sizes and percentages as text
        text = str(given.get(name, "")).strip()
        if text.isascii() and text.isdigit():
            given[name] = int(text)
    return Resources(**resources.given(given, option=True))
