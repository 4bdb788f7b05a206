"""A batch's placement through descriptors, on a real spool: vanished buckets, lost races, links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.client import placing
from taskq.client.submit import submit_batch
from taskq.errors import CorruptFile
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, new_id
from taskq.times.clock import wall_us
from taskq.times.timespec import MINUTE

NOW = wall_us()


def staged(spool: Spool, minutes: list[int]) -> list[tuple[str, TaskName]]:
    """One body in tmp/ for each minute from now, as a batch leaves them before placing."""
    todo = []
    for m in minutes:
        name = TaskName(NOW + m * MINUTE, new_id(NOW), 1)
        entry = spool.tmp_entry(name.id)
        Path(spool.tmp, entry).write_bytes(b"{}\n")
        todo.append((entry, name))
    return todo


def place(spool: Spool, todo: list[tuple[str, TaskName]], placed: list[int]) -> list[bool]:
    fd = os.open(spool.tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return placing.place_all(spool, fd, todo, placed.append, slowly)
    finally:
        os.close(fd)


def slowly(spool: Spool, tmp: str, name: TaskName) -> bool:
    """The one-task placement (submit.py's), as submit_batch hands it over."""
    from taskq.client import submit

    return submit._place_unhinted(spool, tmp, name)


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    made = Spool(str(tmp_path / "spool"))
    made.init()
    return made


def test_tasks_land_in_their_buckets_in_any_order(spool: Spool) -> None:
    todo = staged(spool, [60, 120, 60, 60])
    placed: list[int] = []
    assert place(spool, todo, placed) == [True] * 4
    assert sorted(placed) == [0, 1, 2, 3]
    for _, name in todo:
        assert os.path.isfile(spool.pending_path(name))
    assert os.listdir(spool.tmp) == []


def test_a_bucket_removed_meanwhile_is_made_again(spool: Spool) -> None:
    todo = staged(spool, [60, 60])
    first = spool.pending_path(todo[0][1])
    bucket = os.path.dirname(first)
    placed: list[int] = []

    def daemon_empties_the_bucket(i: int) -> None:
        placed.append(i)
        if i == 0:  # a daemon claims the first task and removes the emptied bucket
            os.rename(first, f"{spool.root}/claimed-elsewhere")
            os.rmdir(bucket)

    fd = os.open(spool.tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        done = placing.place_all(spool, fd, todo, daemon_empties_the_bucket, slowly)
    finally:
        os.close(fd)
    assert done == [True, True] and placed == [0, 1]
    assert os.path.isfile(spool.pending_path(todo[1][1]))


def test_a_body_published_by_someone_else_is_not_ours(spool: Spool) -> None:
    todo = staged(spool, [60, 60])
    os.unlink(os.path.join(spool.tmp, todo[0][0]))  # another submitter published it first
    placed: list[int] = []
    assert place(spool, todo, placed) == [False, True] and placed == [0, 1]


def test_a_bucket_that_is_a_link_is_refused_naming_it(spool: Spool, tmp_path: Path) -> None:
    todo = staged(spool, [60])
    bucket = os.path.dirname(spool.pending_path(todo[0][1]))
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", bucket)
    with pytest.raises(CorruptFile, match=bucket):
        place(spool, todo, [])
    assert os.listdir(tmp_path / "elsewhere") == []


def test_an_empty_batch_submits_nothing(spool: Spool) -> None:
    assert submit_batch(spool, []) == []


def test_a_bucket_gone_since_pending_was_listed_is_made_again(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    todo = staged(spool, [60])
    bucket = todo[0][1].bucket
    # pending/ listed with the bucket in it, and a daemon removed it (emptied) since
    monkeypatch.setattr(placing, "_buckets_present", lambda *_: {bucket})
    assert place(spool, todo, []) == [True]
    assert os.path.isfile(spool.pending_path(todo[0][1]))


def test_pending_is_listed_only_while_that_is_cheaper_than_a_look_a_bucket(spool: Spool) -> None:
    for m in range(placing.LIST_PER_BUCKET + 1):  # buckets of others' tasks, to come
        os.mkdir(spool.bucket_dir(TaskName(NOW + (m + 10) * MINUTE, new_id(NOW), 1).bucket))
    links = os.stat(spool.pending).st_nlink
    counted = links >= 2  # (btrfs and many FUSE filesystems count no subdirectories: never listed)
    assert placing._buckets_present(spool, 1, links) is None
    assert (placing._buckets_present(spool, 2, links) is not None) == counted
    todo = staged(spool, [1])
    assert place(spool, todo, []) == [True]  # (looked for, not listed)
    assert os.path.isfile(spool.pending_path(todo[0][1]))
