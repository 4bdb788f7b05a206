"""A batch's hint file on a real spool: read by record, and whatever stands there never trusted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskq.spool import hints
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, decode_id, encode_id, new_id
from taskq.times.clock import wall_us
from taskq.times.timespec import MINUTE

NOW = wall_us()


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    made = Spool(str(tmp_path / "spool"))
    made.init()
    return made


def run_of(n: int, skip: frozenset[int] = frozenset()) -> list[TaskName]:
    """n names with ids one after another, as a batch draws them, less those skipped."""
    ids = [new_id(NOW) for _ in range(n)]  # one millisecond's: each the last plus one
    return [TaskName(NOW + i * MINUTE, ids[i], 1) for i in range(n) if i not in skip]


def test_a_run_gets_one_file_and_each_id_its_record(spool: Spool) -> None:
    names = run_of(40, skip=frozenset({7, 8}))  # two keyed lines: blank records
    hints.point_batch(spool, names)
    [directory] = os.listdir(spool.ids)
    assert directory == f"+{names[0].id[:10]}"
    assert os.listdir(f"{spool.ids}/{directory}") == [f"{names[0].id}.40.34"]
    assert [hints.read_hint(spool, n.id) for n in names] == names
    first = decode_id(names[0].id)
    assert hints.read_hint(spool, encode_id(first + 7)) is None  # blank: no hint
    assert hints.read_hint(spool, encode_id(first + 40)) is None  # past the run


def test_a_short_run_or_ids_apart_get_links(spool: Spool) -> None:
    names = run_of(3)
    later = encode_id(decode_id(names[-1].id) + (1000 << 80))  # a second later's
    names.append(TaskName(NOW, later, 1))
    hints.point_batch(spool, names)
    assert not [d for d in os.listdir(spool.ids) if d.startswith("+")]
    assert [hints.read_hint(spool, n.id) for n in names] == names
    assert all(os.path.islink(spool.hint_path(n.id)) for n in names)


def test_a_link_wins_over_the_batch_record(spool: Spool) -> None:
    names = run_of(20)
    hints.point_batch(spool, names)
    moved = names[5].with_(run_at=NOW + 99 * MINUTE, attempt=2)
    hints.point_name(spool, moved)
    assert hints.read_hint(spool, moved.id) == moved


@pytest.mark.parametrize("planted", ["fifo", "short", "link", "other millisecond"])
def test_what_stands_in_a_batch_file_place_is_no_hint(spool: Spool, planted: str) -> None:
    names = run_of(20)
    hints.point_batch(spool, names)
    directory = spool.batch_hint_dir(names[0].id)
    [entry] = os.listdir(directory)
    path = f"{directory}/{entry}"
    data = Path(path).read_bytes()
    os.unlink(path)
    if planted == "fifo":
        os.mkfifo(path)  # a read would block for ever
    elif planted == "short":
        Path(path).write_bytes(data[: len(data) // 2])
    elif planted == "link":
        Path(path + ".target").write_bytes(data)
        os.symlink(path + ".target", path)
    else:
        other = encode_id(decode_id(names[0].id) - (1 << 80))  # a millisecond earlier
        Path(f"{directory}/{other}.20.34").write_bytes(data)
    found = [hints.read_hint(spool, n.id) for n in names]
    if planted == "short":
        assert found[:5] == names[:5] and found[-1] is None
    else:
        assert found == [None] * 20


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.binary(max_size=2000), other=st.text(min_size=1, max_size=40))
def test_whatever_bytes_a_batch_file_holds_no_lookup_raises_or_lies(
    spool: Spool, data: bytes, other: str
) -> None:
    """A batch file's bytes, or any other file beside it, give a name with the id asked or none."""
    names = run_of(20)
    hints.point_batch(spool, names)
    directory = spool.batch_hint_dir(names[0].id)
    [entry] = os.listdir(directory)
    Path(f"{directory}/{entry}").write_bytes(data)
    if "/" not in other and other not in (".", "..", entry) and "\0" not in other:
        Path(f"{directory}/{other}").write_bytes(data)
    for name in names:
        found = hints.read_hint(spool, name.id)
        assert found is None or found.id == name.id
    shutil.rmtree(directory)  # the next example draws its own run
