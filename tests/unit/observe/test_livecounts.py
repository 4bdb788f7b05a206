"""observe.livecounts through observe.top.gather, on a real spool edited by hand between redraws.

A count that rests on an earlier check must say how old it is; what a
gathering cannot miss (a new bucket, a bucket gone, a bucket whose minute
has come, one changed too recently to trust) is counted at once whatever
the budget.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskq.cli.top import lines
from taskq.observe import dircounts
from taskq.observe.livecounts import LiveCounts
from taskq.observe.top import gather
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, bucket_of
from taskq.times.timespec import SECOND

MINUTE = 60 * SECOND
NOW = 1_800_000_000 * SECOND + 30 * SECOND


def _put(spool: Spool, run_at: int, n: int, queue: str = "q") -> Path:
    bucket = Path(spool.bucket_dir(bucket_of(run_at)))
    bucket.mkdir(exist_ok=True)
    path = bucket / str(TaskName(run_at, f"01M8RM0TDQZDF7PK8251KRPM{n:02d}", 1, queue))
    path.write_text("{}")
    return path


def _pending(spool: Spool, now: int, live: LiveCounts) -> tuple[dict[str, int], float]:
    picture = gather(spool, now, "here", frozenset(), live)
    return {q.name: q.pending for q in picture.queues}, picture.counts_age


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Spool:
    # Every bucket here is a moment old: trusted at once, as a bucket unchanged for SETTLE is.
    monkeypatch.setattr(dircounts, "SETTLE", -(10**12))
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    return spool


def test_with_time_to_spare_every_bucket_is_checked_each_time(spool: Spool) -> None:
    live = LiveCounts(spool, budget=60)
    _put(spool, NOW + 5 * MINUTE, 1)
    assert _pending(spool, NOW, live) == ({"q": 1}, 0.0)
    _put(spool, NOW + 5 * MINUTE + SECOND, 2)  # by hand, into a bucket counted before
    assert _pending(spool, NOW, live) == ({"q": 2}, 0.0)


def test_a_count_not_checked_again_says_its_age(spool: Spool) -> None:
    live = LiveCounts(spool, budget=0)  # one bucket re-checked a gathering
    _put(spool, NOW + 5 * MINUTE, 1)
    _put(spool, NOW + 6 * MINUTE, 2)
    assert _pending(spool, NOW, live) == ({"q": 2}, 0.0)  # new: counted at once
    _put(spool, NOW + 5 * MINUTE + SECOND, 3)
    _put(spool, NOW + 6 * MINUTE + SECOND, 4)
    time.sleep(0.01)  # so that the age shown is measurably more than nothing
    counts, age = _pending(spool, NOW, live)
    assert counts == {"q": 3} and age >= 0.01  # one bucket's count is the old one, and says so
    text = "\n".join(t for _, t, _ in lines(gather(spool, NOW, "here", frozenset(), live)))
    assert "(pending after this minute: counted up to " in text
    assert _pending(spool, NOW, live)[0] == {"q": 4}

    added = _put(spool, NOW + 9 * MINUTE, 5, "new")  # a new bucket: counted at once
    assert _pending(spool, NOW, live)[0] == {"q": 4, "new": 1}
    added.unlink()
    added.parent.rmdir()
    assert _pending(spool, NOW, live)[0] == {"q": 4}  # a bucket gone: gone at once
    # Their minutes have come: counted as due, from the buckets themselves.
    assert _pending(spool, NOW + 6 * MINUTE, live) == ({"q": 4}, 0.0)


def test_a_bucket_too_fresh_to_trust_is_counted_again_each_time(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dircounts, "SETTLE", 10**12)  # nothing has settled
    live = LiveCounts(spool, budget=0)
    _put(spool, NOW + 5 * MINUTE, 1)
    assert _pending(spool, NOW, live) == ({"q": 1}, 0.0)
    _put(spool, NOW + 5 * MINUTE + SECOND, 2)
    assert _pending(spool, NOW, live) == ({"q": 2}, 0.0)


def test_round_robin_reaches_every_bucket(spool: Spool) -> None:
    live = LiveCounts(spool, budget=0)
    for n in range(3):
        _put(spool, NOW + (5 + n) * MINUTE, n)
    _pending(spool, NOW, live)
    for n in range(3):
        _put(spool, NOW + (5 + n) * MINUTE + SECOND, 10 + n)
    seen = [_pending(spool, NOW, live)[0]["q"] for _ in range(3)]
    assert seen == [4, 5, 6]
    assert _pending(spool, NOW, live)[1] > 0  # the three checks were made at different times
