"""Writing `taskq ls`: rows rendered to text, in order, by worker processes past the first.

A long listing spends most of its time opening, reading and closing task
files, several microseconds of system time each, and one process can use
only one core. So the first HEAD directories are listed in this process
(the first line comes at once, and a small spool never starts a process);
past them each directory (a minute bucket, a done/ day) goes to one of
WORKERS processes, which lists it, reads its bodies and renders its lines,
and this process writes the texts in listing order. At most WINDOW
directories are in flight, so memory stays bounded by a few directories,
whatever the spool holds, and a slow reader of the output slows the workers
instead of filling memory.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import functools
import itertools
import json
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from taskq.cli.render import ls_header, ls_line
from taskq.errors import TempFail
from taskq.spool import listing
from taskq.spool.layout import Spool
from taskq.spool.listing import Filter, Row
from taskq.spool.walk import Place
from taskq.times import zones

WORKERS = min(4, len(os.sched_getaffinity(0)))
HEAD = 16  # directories listed in this process before any worker starts
CHUNK = 16  # directories a worker lists at a time (a hand-over costs as much as a few rows)
WINDOW = 3 * WORKERS  # chunks handed to workers and not yet written
BLOCK = 256  # lines written at once


@dataclass(frozen=True)
class Lines:
    """How rows become lines, as the command's options say (picklable, for the workers)."""

    as_json: bool
    with_command: bool
    local: bool | None

    def header(self) -> str | None:
        """The header line of the text form (the JSON form has none)."""
        return None if self.as_json else ls_header(self.with_command, _stamp(self.local))

    def line(self, row: Row) -> str:
        return _formatter(self)(row)


@functools.cache
def _formatter(lines: Lines) -> Callable[[Row], str]:
    """The function that renders a row as these options say (found once, not per row)."""
    if lines.as_json:
        with_command = lines.with_command
        return lambda row: json.dumps(listing.as_object(row, with_command), ensure_ascii=False)
    return functools.partial(ls_line, with_command=lines.with_command, stamp=_stamp(lines.local))


@functools.cache
def _stamp(local: bool | None) -> Callable[[int], str]:
    return zones.stamp(local, os.environ)


class _Writer:
    """Lines to the output in blocks, after the header, up to the listing's limit."""

    def __init__(self, lines: Lines, limit: int | None, write: Callable[[str], None]) -> None:
        self.lines, self.left, self.write = lines, limit, write
        self.block: list[str] = []
        self.started = False

    def add(self, texts: list[str]) -> bool:
        """Write these lines (in blocks); False once the limit is reached."""
        if self.left is not None:
            texts = texts[: self.left]
            self.left -= len(texts)
        if texts and not self.started:
            header = self.lines.header()
            self.block += [header, texts[0]] if header is not None else texts[:1]
            self.flush()  # the first line at once
            self.started, texts = True, texts[1:]
        self.block += texts
        if len(self.block) >= BLOCK:
            self.flush()
        return self.left != 0

    def add_text(self, text: str) -> bool:
        """add(), for lines given as one text, each ending in a newline."""
        if not text:
            return self.left != 0
        if not self.started or (self.left is not None and text.count("\n") >= self.left):
            return self.add(text[:-1].split("\n"))  # not splitlines: U+2028 is not an end
        if self.left is not None:
            self.left -= text.count("\n")
        self.flush()
        self.write(text)
        return self.left != 0

    def flush(self) -> None:
        if self.block:
            self.write("\n".join(self.block) + "\n")
            self.block.clear()


def write_rows(
    rows: Iterator[Row], flt: Filter, lines: Lines, write: Callable[[str], None]
) -> None:
    """Write these rows (a lookup's, such as --key), in this process."""
    out = _Writer(lines, flt.limit, write)
    for row in rows:
        if not out.add([lines.line(row)]):
            break
    out.flush()


def write_jobs(spool: Spool, flt: Filter, lines: Lines, write: Callable[[str], None]) -> None:
    """Write what the filter selects, directory by directory, the long tail in workers."""
    out = _Writer(lines, flt.limit, write)
    todo = listing.jobs(spool, flt)
    for job in itertools.islice(todo, HEAD):
        for row in listing.job_rows(spool, job, flt):
            if not out.add([lines.line(row)]):
                out.flush()
                return
    rest = _peek(todo)
    if rest is not None and WORKERS > 1:
        for text in _in_workers(spool.root, rest, flt, lines):
            if not out.add_text(text):
                break
    elif rest is not None:
        for job in rest:
            if not out.add(_render(spool, job, flt, lines)):
                break
    out.flush()


def _peek(todo: Iterator[Place]) -> Iterator[Place] | None:
    """The remaining jobs, or None if there are none (no worker starts for nothing)."""
    first = next(todo, None)
    return None if first is None else itertools.chain([first], todo)


def _in_workers(root: str, todo: Iterable[Place], flt: Filter, lines: Lines) -> Iterator[str]:
    """The jobs' lines, rendered by worker processes, CHUNK directories at a time, in order."""
    context = multiprocessing.get_context("fork")  # no threads yet; the workers need no imports
    with concurrent.futures.ProcessPoolExecutor(WORKERS, context, initializer=_worker) as pool:
        flying: deque[concurrent.futures.Future[str]] = deque()
        try:
            for chunk in _chunks(todo, CHUNK):
                flying.append(pool.submit(_render_in_worker, root, chunk, flt, lines))
                if len(flying) >= WINDOW:
                    yield flying.popleft().result()
            while flying:
                yield flying.popleft().result()
        except concurrent.futures.process.BrokenProcessPool:
            raise TempFail("a listing worker process died (out of memory?); list again") from None
        finally:
            for future in flying:  # stopped early (the limit, a closed pipe): drop the rest
                future.cancel()


def _chunks(todo: Iterable[Place], n: int) -> Iterator[tuple[Place, ...]]:
    it = iter(todo)
    while chunk := tuple(itertools.islice(it, n)):
        yield chunk


def _worker() -> None:
    """A worker leaves ^C to its parent, which stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _render_in_worker(root: str, chunk: tuple[Place, ...], flt: Filter, lines: Lines) -> str:
    """A chunk's lines as one text (one string crosses the pipe far faster than many)."""
    spool = Spool(root)
    spool.warn = _warn
    return "".join(line + "\n" for job in chunk for line in _render(spool, job, flt, lines))


def _render(spool: Spool, job: Place, flt: Filter, lines: Lines) -> list[str]:
    line = _formatter(lines)
    return [line(row) for row in listing.job_rows(spool, job, flt)]


def _warn(message: str) -> None:
    with contextlib.suppress(OSError):
        sys.stderr.write(f"taskq: warning: {message}\n")
        sys.stderr.flush()
