"""The spool's own configuration, SPOOL/config.toml, read once into one object.

The file is optional and taskq never writes it; taskq-spool(5) documents
it. Its [limits] table holds the limits that submit enforces (limits.check),
its [security] table whose tasks daemons may run (security.run_as). The
file is read and parsed once; each table is checked when it is first used,
so that submit, which uses only the limits, and the daemon, which uses only
the security table, each fail (ConfigError, exit 78, naming the file) for
a mistake in their own table only.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from typing import TYPE_CHECKING, Any

from taskq.errors import BadInput, ConfigError, TaskqError
from taskq.spool import fields
from taskq.spool.layout import CONFIG
from taskq.spool.record import Frozen, record
from taskq.spool.task import check_queue
from taskq.text.lazyre import Lazy
from taskq.times.timespec import DAY, SECOND, parse_duration

if TYPE_CHECKING:
    from taskq.spool.runas import UserRules

_LIMITS = ("max_overdue", "min_free_bytes", "min_free_inodes")


# Records, neither dataclasses nor NamedTuples: submit imports this module,
# and both compile methods as the class is made (spool/record.py).
@record
class Notify(Frozen):
    """The [notify] table: a hook run with one JSON event per ended task."""

    command: tuple[str, ...]
    on: frozenset[str]  # states, of END_STATES
    timeout: int = 30 * SECOND


@record
class QueueSettings(Frozen):
    """A [queues.NAME] table: limits that hold across every daemon of the spool."""

    limit: int | None = None  # attempts of the queue running at once
    rate: tuple[int, int] | None = None  # (starts, per this many µs)


@record
class Limits(Frozen):
    """The [limits] table; zero or absent means no limit."""

    max_overdue: int = 0
    min_free_bytes: int = 0
    min_free_inodes: int = 0


class SpoolConfig:
    """A spool's config.toml as read; its tables, typed and checked, are properties."""

    def __init__(self, path: str, doc: dict[str, Any]) -> None:
        self.path = path
        self.doc = doc  # as parsed; {} when there is no file

    @functools.cached_property
    def limits(self) -> Limits:
        """The [limits] table: max_overdue, min_free_bytes, min_free_inodes."""
        table = self.doc.get("limits", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.path}: [limits] must be a table")
        unknown = set(table) - set(_LIMITS)
        if unknown:
            raise ConfigError(f"{self.path}: unknown setting limits.{sorted(unknown)[0]}")
        return Limits(
            max_overdue=_count(self.path, table, "max_overdue"),
            min_free_bytes=_size(self.path, table.get("min_free_bytes", 0)),
            min_free_inodes=_count(self.path, table, "min_free_inodes"),
        )

    @functools.cached_property
    def security(self) -> UserRules:
        """The [security] table: allow = [users] (absent: all), deny = [users]."""
        table = self.doc.get("security", {})
        if not isinstance(table, dict) or set(table) - {"allow", "deny"}:
            raise ConfigError(f"{self.path}: [security] takes only allow and deny")
        allow = _users(self.path, table, "allow")
        deny = _users(self.path, table, "deny")
        from taskq.spool.runas import UserRules  # the daemon's alone: off submit's import budget

        return UserRules(allow=allow, deny=deny or frozenset())

    @functools.cached_property
    def queues(self) -> dict[str, QueueSettings]:
        """The [queues.NAME] tables: limit = N, rate = "N/PERIOD"."""
        table = self.doc.get("queues", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.path}: [queues] must hold one table per queue")
        return {self._queue_name(name): self._queue(name, t) for name, t in table.items()}

    def queue_limits(self) -> dict[str, int]:
        """Each queue's limit of attempts at once, from its [queues.NAME] table."""
        return {q: s.limit for q, s in self.queues.items() if s.limit is not None}

    def queue_rates(self) -> dict[str, tuple[int, int]]:
        """Each queue's rate, (starts, per period in µs), from its [queues.NAME] table."""
        return {q: s.rate for q, s in self.queues.items() if s.rate is not None}

    def _queue_name(self, name: str) -> str:
        try:
            return check_queue(name)
        except TaskqError as e:
            raise ConfigError(f"{self.path}: [queues.{name}]: {e}") from None

    def _queue(self, name: str, table: Any) -> QueueSettings:
        where = f"{self.path}: queues.{name}"
        if not isinstance(table, dict) or set(table) - {"limit", "rate"}:
            raise ConfigError(f"{where}: takes only limit and rate")
        limit = table.get("limit")
        if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_LIMIT):
            raise ConfigError(f"{where}.limit must be a whole number from 1 to {MAX_LIMIT}")
        rate = table.get("rate")
        return QueueSettings(limit=limit, rate=None if rate is None else _rate(where, rate))

    @functools.cached_property
    def notify(self) -> Notify | None:
        """The [notify] table: command = [argv], on = [states], timeout; None if absent."""
        table = self.doc.get("notify")
        if table is None:
            return None
        where = f"{self.path}: notify"
        if not isinstance(table, dict) or set(table) - {"command", "on", "timeout"}:
            raise ConfigError(f"{where}: takes only command, on and timeout")
        try:
            command = fields.command(table.get("command"), "notify.command")[0]
        except BadInput as e:
            raise ConfigError(f"{self.path}: {e}") from None
        from taskq.spool.states import END_STATES  # the daemon's: off submit's start-up

        on = table.get("on", list(END_STATES))
        if not (type(on) is list and set(map(str, on)) <= set(END_STATES)):
            raise ConfigError(f"{where}.on must list some of done, failed, cancelled")
        timeout = _duration(where, table.get("timeout", "30s"))
        return Notify(command=tuple(command), on=frozenset(on), timeout=timeout)


MAX_HOOK = DAY  # the longest [notify] timeout (subprocess waits take at most 24.8 days)


def _duration(where: str, value: Any) -> int:
    """A timeout: a DURATION string ("30s") or a number of seconds, above zero, a day at most."""
    try:
        us = parse_duration(value) if type(value) is str else fields.seconds("timeout", value)
    except TaskqError:
        us = 0
    if not 0 < us <= MAX_HOOK:
        raise ConfigError(f'{where}.timeout must be a duration from above 0 to 1d, e.g. "30s"')
    return us


MAX_LIMIT = 10_000  # permits of one limit (spool/permits.py names them with four digits at most)
_RATE = Lazy(r"\s*(\d+)\s*/\s*(\S.*?)\s*")


def _rate(where: str, value: Any) -> tuple[int, int]:
    """A rate: "N/PERIOD", e.g. "10/1m": at most N starts in any PERIOD."""
    m = _RATE.fullmatch(value) if isinstance(value, str) else None
    try:
        count, period = (int(m.group(1)), parse_duration(m.group(2))) if m else (0, 0)
    except TaskqError:
        count, period = 0, 0
    if not (1 <= count <= MAX_LIMIT and period > 0):
        raise ConfigError(f'{where}.rate must be "N/PERIOD", N from 1 to {MAX_LIMIT}, e.g. "10/1m"')
    return count, period


def load(root: str) -> SpoolConfig:
    """Read the config.toml of the spool at root; no file reads as an empty one."""
    path = os.path.join(root, CONFIG)
    try:
        data = _read(path)
    except FileNotFoundError:
        return SpoolConfig(path, {})
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    import tomllib  # only for a file: off submit's import budget (tests/e2e/test_submit.py)

    try:
        return SpoolConfig(path, tomllib.loads(data.decode()))
    except RecursionError:
        raise ConfigError(f"cannot read {path}: nested too deeply") from None
    except ValueError as e:  # not UTF-8, not TOML, or a number too long to read
        raise ConfigError(f"cannot read {path}: {e}") from None


def _read(path: str) -> bytes:
    """Read config.toml without blocking: in a shared spool a member could make it a FIFO.

    (It may be a link, which an operator may want; what it names must be a
    regular file of at most MAX_CONFIG bytes.)
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONFIG:
            raise OSError(errno.EINVAL, f"not a regular file of at most {MAX_CONFIG} bytes")
        return os.read(fd, MAX_CONFIG + 1)
    finally:
        os.close(fd)


MAX_CONFIG = 1 << 20


def _count(path: str, table: dict[str, Any], key: str) -> int:
    try:
        return fields.whole(f"limits.{key}", table.get(key, 0), 0, 1 << 63)
    except BadInput as e:
        raise ConfigError(f"{path}: {e}") from None


def _size(path: str, value: Any) -> int:
    """A byte count: 1048576, or a string such as "512M", "10GiB"."""
    try:
        return fields.size("limits.min_free_bytes", value)
    except BadInput:
        raise ConfigError(
            f'{path}: limits.min_free_bytes must be bytes, e.g. 1073741824 or "1G"'
        ) from None


def _users(path: str, table: dict[str, Any], key: str) -> frozenset[str] | None:
    """A list of user names, or None when the key is absent."""
    value = table.get(key)
    if value is None:
        return None
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ConfigError(f"{path}: security.{key} must be a list of user names")
    return frozenset(value)
