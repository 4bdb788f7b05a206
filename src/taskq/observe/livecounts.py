"""The counts of a reader that counts the same spool again and again (`taskq top`), and their age.

`taskq stats` stat()s every pending bucket each time it runs, to see
which changed since its cache was written: at a million tasks that is
47,500 minute buckets, too many for a view redrawn every two seconds. A
bucket after now's minute changes only when a task is submitted into it
(or an operator edits it by hand), so top keeps its counts in memory and
re-checks those buckets a slice at a time: each gathering counts the
buckets it holds no count of (new since the last gathering, or changed
too recently to be trusted: dircounts' SETTLE), then re-checks the
others round robin in name order for as long as BUDGET allows. The rest
(one at least) keep the count of their last check, and `age` says how long ago the
oldest such check was: top shows it beside the counts, so that a figure
that is not current never looks current. A bucket whose minute has come
is no future one: stats counts it with the due ones, from a fresh
stat(), and it leaves this sum.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import time

from taskq.observe.dircounts import DirCounts
from taskq.spool.layout import Spool
from taskq.spool.states import State

BUDGET = 0.1  # seconds of re-checking future buckets per gathering


class LiveCounts:
    """A dircounts cache kept between gatherings, the future buckets' counts, and their age.

    The sum of the future buckets' counts is kept as it changes (a Counter
    of count texts), so a gathering costs a listing of pending/, set
    arithmetic (in C) and the buckets it checks, not Python per bucket.
    """

    def __init__(self, spool: Spool, budget: float = BUDGET) -> None:
        self.cache = DirCounts(spool.root, spool.run)
        self.budget_ns = int(budget * 1e9)
        self.texts: dict[str, str] = {}  # future bucket -> its count text as last checked
        self.checked: dict[str, int] = {}  # future bucket -> when (monotonic ns)
        self.unsure: set[str] = set()  # counted, but changed too recently to be trusted
        self.sum: collections.Counter[str] = collections.Counter()  # of self.texts' values
        self.cursor = ""  # the last bucket re-checked round robin
        self.age = 0.0  # seconds since the oldest check a future count rests on
        self.saved = False

    def future(self, buckets: list[str], into: collections.Counter[str]) -> None:
        """Add the count texts of the future buckets (sorted names) to into, as count_text does."""
        began = time.monotonic_ns()
        names = set(buckets)
        for bucket in self.texts.keys() - names:  # gone, or its minute has come
            self._forget(bucket)
        for bucket in (names - self.texts.keys()) | self.unsure:
            self._check(bucket, began)
        start = bisect.bisect_right(buckets, self.cursor)
        for bucket in itertools.chain(buckets[start:], buckets[:start]):
            if self.checked[bucket] < began:  # at least one a time: every bucket gets its turn
                self._check(bucket, began)
                self.cursor = bucket
                if time.monotonic_ns() - began >= self.budget_ns:
                    break
        into.update(self.sum)
        oldest = min(self.checked.values(), default=began)
        self.age = (time.monotonic_ns() - oldest) / 1e9 if oldest < began else 0.0

    def _check(self, bucket: str, now: int) -> None:
        """Count one bucket again: a stat(), and a listing if it changed."""
        self._forget(bucket)
        text = self.cache.count_text(State.PENDING, bucket)
        if self.cache.kept(State.PENDING, bucket):
            self.unsure.discard(bucket)
        else:
            self.unsure.add(bucket)
        self.texts[bucket], self.checked[bucket] = text, now
        self.sum[text] += 1

    def _forget(self, bucket: str) -> None:
        text = self.texts.pop(bucket, None)
        if text is not None:
            self.sum[text] -= 1
            if not self.sum[text]:
                del self.sum[text]
        self.checked.pop(bucket, None)
        self.unsure.discard(bucket)

    def carry(self) -> None:
        """After a gathering: the next one starts from what this one counted.

        The cache file is written after the first gathering only (which
        counted everything); later ones hold only what they re-checked.
        """
        if self.saved:
            self.cache.close()
        else:
            self.cache.save()
            self.saved = True
        self.cache.carry()
