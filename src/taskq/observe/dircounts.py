"""Task counts per directory and queue, cached by the directory's own stat().

Listing a directory costs far more than stat()ing it (about 75 us against
5 us for a minute bucket here), and at a million tasks `taskq stats` would
spend seconds listing 43,200 buckets that have not changed since it last
ran. So it keeps run/counts.tsv: for each directory it counted, the
directory's inode, mtime, ctime and size, and its counts by queue. A
directory whose stat() still matches is not listed again. Adding or removing
a name changes a directory's mtime and ctime, so a match means the same
entries, with one exception that the cache guards against: a change within
the filesystem's timestamp granularity of the count (a few milliseconds)
leaves them as they were. A count is therefore only kept for a directory
that had not changed for SETTLE before it was listed (git's "racy" rule).

The cache is derived data, never the record: losing it, or a reader that
cannot write it, only makes stats list everything again.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import time

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import COUNTS_CACHE

SETTLE = 2_000_000_000  # ns a directory must have been unchanged to be cached
MAX_CACHE = 64 << 20  # a larger cache file is not read (counting lists everything instead)


def task_names(directory: str) -> list[str]:
    """The task-like names in a directory: cheap checks only, no parsing."""
    try:
        return [e for e in os.listdir(directory) if e[23:24] == "_" and e[8:9] == "T"]
    except (FileNotFoundError, NotADirectoryError):
        return []


def queue_of(entry: str) -> str:
    """A task name's queue: its last field."""
    return entry[entry.rfind("_") + 1 :]


class DirCounts:
    """Counts by queue of the tasks in directories of one spool, cached.

    The cache is text, one directory a line: its path relative to the spool,
    then inode, mtime_ns, ctime_ns and size, then QUEUE:COUNT,... (tab
    separated). Lines are split only when their directory is looked up.
    """

    def __init__(self, root: str, run_dir: str) -> None:
        self.root = root
        self.path = os.path.join(run_dir, COUNTS_CACHE)
        self.old = self._load()
        self.new: dict[str, str] = {}
        self.now = time.time_ns()
        self._fds: dict[str, int] = {}

    def _load(self) -> dict[str, str]:
        """The cache as read; anything but a regular file of text reads as empty (derived data)."""
        try:
            text = fsutil.read_small(self.path, MAX_CACHE)[0].decode()
        except (OSError, ValueError, CorruptFile):  # a FIFO there would block: never opened so
            return {}
        old = {}
        for line in text.splitlines():
            rel, _, rest = line.partition("\t")
            old[rel] = rest
        return old

    def count(self, parent: str, name: str) -> dict[str, int]:
        """The tasks by queue of parent/name (relative to the spool), listed only if it changed."""
        return dict(_parse_counts(self.count_text(parent, name)) or {})

    def count_text(self, parent: str, name: str) -> str:
        """count() as its cached text, QUEUE:COUNT,...; a sum parses each distinct text once."""
        rel = f"{parent}/{name}" if name else parent
        try:
            st = os.stat(name or ".", dir_fd=self._fd(parent))
        except (FileNotFoundError, NotADirectoryError):
            return ""
        key = f"{st.st_ino}\t{st.st_mtime_ns}\t{st.st_ctime_ns}\t{st.st_size}"
        cached = self.old.get(rel)
        if cached is not None:
            stamp, _, counted = cached.rpartition("\t")
            if stamp == key and _parse_counts(counted) is not None:
                self.new[rel] = cached
                return counted
        counts = collections.Counter(queue_of(e) for e in task_names(f"{self.root}/{rel}"))
        counted = ",".join(f"{q}:{n}" for q, n in counts.items())
        if self.now - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLE:
            self.new[rel] = f"{key}\t{counted}"
        return counted

    def kept(self, parent: str, name: str) -> bool:
        """Whether this run's count of parent/name is kept (its directory had settled)."""
        return (f"{parent}/{name}" if name else parent) in self.new

    def _fd(self, parent: str) -> int:
        """An open descriptor of a directory of the spool: stat() relative to it walks less."""
        fd = self._fds.get(parent)
        if fd is None:
            fd = os.open(f"{self.root}/{parent}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._fds[parent] = fd
        return fd

    def carry(self) -> None:
        """Count again, from all this cache holds (a reader that counts again and again).

        What this run counted replaces what it was read with; a directory
        that is gone keeps its line in memory, which no new one can match
        (its inode and ctime).
        """
        self.old.update(self.new)
        self.new = {}
        self.now = time.time_ns()

    def close(self) -> None:
        """Close the directories held open (the next count opens them again)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def save(self) -> None:
        """Replace the cache with what this run used (best effort: never fails); close up."""
        self.close()
        if self.new == self.old:
            return
        text = "".join(f"{rel}\t{rest}\n" for rel, rest in self.new.items())
        with contextlib.suppress(OSError):
            fsutil.replace_file(self.path, text.encode(), sync=False)


def sum_texts(texts: collections.Counter[str], into: collections.Counter[str]) -> None:
    """Add counts given as how many directories had each count_text() to into."""
    for text, times in texts.items():
        for queue, n in (_parse_counts(text) or {}).items():
            into[queue] += n * times


@functools.lru_cache(maxsize=4096)
def _parse_counts(text: str) -> dict[str, int] | None:
    """QUEUE:COUNT,... as a dict (shared: do not change it); None if the text is not that."""
    counts = {}
    for item in text.split(",") if text else ():
        queue, _, n = item.partition(":")
        if not (n.isascii() and n.isdigit() and len(n) <= 18):
            return None
        counts[queue] = int(n)
    return counts
