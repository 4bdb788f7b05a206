"""The spool's limits (SPOOL/config.toml) and the backpressure check at submit.

A spool over a limit refuses new work with EX_TEMPFAIL (75) and a message
naming the limit and its value, instead of accepting work it cannot hold.
The limits are, in the [limits] table: max_overdue (pending tasks already
due), min_free_bytes and min_free_inodes (on the spool's filesystem).
Zero or absent means no limit. The file is optional; taskq-spool(5)
documents it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from taskq import fsutil
from taskq.errors import ConfigError, TempFail
from taskq.security import Policy
from taskq.spool import Spool
from taskq.task import TaskName, bucket_of, valid_bucket

CONFIG = "config.toml"
_SIZE = re.compile(r"(\d+)\s*([KMGT]i?B?|B)?", re.IGNORECASE)
_SCALE = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Limits:
    max_overdue: int = 0
    min_free_bytes: int = 0
    min_free_inodes: int = 0


def load(spool: Spool) -> Limits:
    """Read the [limits] table of the spool's config.toml; no file, no limits."""
    import tomllib  # only when there is a file to read

    path = os.path.join(spool.root, CONFIG)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        return Limits()
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    table = doc.get("limits", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [limits] must be a table")
    unknown = set(table) - {"max_overdue", "min_free_bytes", "min_free_inodes"}
    if unknown:
        raise ConfigError(f"{path}: unknown setting limits.{sorted(unknown)[0]}")
    return Limits(
        max_overdue=_count(path, table, "max_overdue"),
        min_free_bytes=_size(path, table.get("min_free_bytes", 0)),
        min_free_inodes=_count(path, table, "min_free_inodes"),
    )


def load_policy(spool: Spool) -> Policy:
    """Read the [security] table: allow = [users] (absent: all), deny = [users]."""
    import tomllib

    path = os.path.join(spool.root, CONFIG)
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f).get("security", {})
    except FileNotFoundError:
        return Policy()
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    if not isinstance(table, dict) or set(table) - {"allow", "deny"}:
        raise ConfigError(f"{path}: [security] takes only allow and deny")
    lists = {}
    for key in ("allow", "deny"):
        value = table.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise ConfigError(f"{path}: security.{key} must be a list of user names")
        lists[key] = value
    allow = None if lists["allow"] is None else frozenset(lists["allow"])
    return Policy(allow=allow, deny=frozenset(lists["deny"] or ()))


def _count(path: str, table: dict[str, Any], key: str) -> int:
    value = table.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{path}: limits.{key} must be a whole number >= 0")
    return value


def _size(path: str, value: Any) -> int:
    """A byte count: 1048576, or a string such as "512M", "10GiB"."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if not m:
        raise ConfigError(f'{path}: limits.min_free_bytes must be bytes, e.g. 1073741824 or "1G"')
    return int(m.group(1)) * _SCALE[(m.group(2) or "")[:1].upper()]


def check(spool: Spool, limits: Limits, now: int, adding: int = 1) -> None:
    """Raise TempFail if accepting `adding` tasks would break a limit."""
    if limits.min_free_bytes or limits.min_free_inodes:
        st = os.statvfs(spool.root)
        free = st.f_bavail * st.f_frsize
        if free < limits.min_free_bytes:
            raise TempFail(
                f"spool is full: {free} bytes free, below limits.min_free_bytes = "
                f"{limits.min_free_bytes}; try again later"
            )
        if st.f_favail < limits.min_free_inodes + adding:
            raise TempFail(
                f"spool is full: {st.f_favail} inodes free for {adding} task(s), "
                f"limits.min_free_inodes = {limits.min_free_inodes}; try again later"
            )
    if limits.max_overdue:
        overdue = count_overdue(spool, now, stop_after=limits.max_overdue)
        if overdue + adding > limits.max_overdue:
            count = f"more than {limits.max_overdue}" if overdue > limits.max_overdue else overdue
            raise TempFail(
                f"spool is over its backlog limit: {count} tasks overdue, "
                f"limits.max_overdue = {limits.max_overdue}; try again later"
            )


def count_overdue(spool: Spool, now: int, stop_after: int | None = None) -> int:
    """Count pending tasks already due, reading only buckets up to now."""
    current = bucket_of(now)
    count = 0
    for bucket in fsutil.listdir(spool.pending):
        if bucket > current:
            break
        if not valid_bucket(bucket):
            continue
        for entry in fsutil.listdir(spool.bucket_dir(bucket)):
            try:
                due = TaskName.parse(entry).run_at <= now
            except ValueError:
                continue
            count += due
        if stop_after is not None and count > stop_after:
            break
    return count
