"""The claim order: daemons sharing a spool take different tasks first, and the oldest first."""

from __future__ import annotations

import json
import os
from pathlib import Path

from taskq.daemon.claimorder import SPREAD, STEAL_AFTER, ClaimOrder, Peer, live_peers
from taskq.daemon.dueindex import DueIndex
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, new_id
from taskq.times.timespec import MS, SECOND

NOW = 1_800_000_000 * SECOND
PEERS = [Peer("hostA_1", 8), Peer("hostB_2", 8), Peer("hostC_3", 8)]


def put(spool: Spool, run_at: int, queue: str = "default") -> TaskName:
    name = TaskName(run_at, new_id(NOW), 1, queue)
    os.makedirs(spool.bucket_dir(name.bucket), exist_ok=True)
    Path(spool.bucket_dir(name.bucket), str(name)).write_text("{}")
    return name


def orders(me: str, peers: list[Peer] = PEERS) -> ClaimOrder:
    order = ClaimOrder(me, next((p.workers for p in peers if p.daemon == me), 8))
    order.set_peers(peers)
    return order


def index_of(spool: Spool, me: str, peers: list[Peer] = PEERS) -> DueIndex:
    index = DueIndex(spool, orders(me, peers))
    assert index.rescan(NOW) == []
    return index


def drain(index: DueIndex, now: int) -> list[TaskName]:
    taken = []
    while (e := index.pop_due(lambda t: t <= now, lambda q: True)) is not None:
        taken.append(e[0])
    return taken


def test_every_task_has_one_first_taker_all_agree_on() -> None:
    ids = [new_id(NOW) for _ in range(3000)]
    views = [orders(p.daemon) for p in PEERS]
    for task_id in ids:
        takers = [v.first_taker(task_id) for v in views]
        assert len(set(takers)) == 1
        assert [v.mine(task_id) for v in views].count(True) == 1
    shares = [sum(views[i].mine(t) for t in ids) for i in range(3)]
    assert all(800 < s < 1200 for s in shares), shares  # a third each, give or take


def test_shares_follow_the_workers() -> None:
    peers = [Peer("a_1", 2), Peer("b_1", 6)]
    ids = [new_id(NOW) for _ in range(4000)]
    small = orders("a_1", peers)
    share = sum(small.mine(t) for t in ids) / len(ids)
    assert 0.2 < share < 0.3, share


def test_in_a_burst_each_daemon_first_tries_its_own_tasks(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    burst = [put(spool, NOW - SECOND) for _ in range(90)]
    firsts = []
    for peer in PEERS:
        index = index_of(spool, peer.daemon)
        order = index.order
        taken = drain(index, NOW)
        assert sorted(taken) == sorted(burst)  # every task, in the end
        own = [t for t in taken if order.mine(t.id)]
        assert taken[: len(own)] == sorted(own)  # its own first, oldest first
        firsts.append(set(own))
    assert not (firsts[0] & firsts[1]) and not (firsts[1] & firsts[2])
    assert set().union(*firsts) == set(burst)


def test_another_daemons_task_waits_its_turn_then_is_taken(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    task = put(spool, NOW)
    me = next(p.daemon for p in PEERS if not orders(p.daemon).mine(task.id))
    index = index_of(spool, me)
    assert index.pop_due(lambda t: t <= NOW, lambda q: True) is None  # its taker's chance
    wake = index.next_run_at()
    assert wake is not None and wake >= NOW + STEAL_AFTER
    later = NOW + STEAL_AFTER + 100 * MS
    assert drain(index, later) == [task]


def put_for(spool: Spool, run_at: int, order: ClaimOrder, mine: bool) -> TaskName:
    """A task due at run_at whose first taker is (mine) or is not us."""
    task_id = next(i for i in iter(lambda: new_id(NOW), "") if order.mine(i) == mine)
    name = TaskName(run_at, task_id, 1)
    os.makedirs(spool.bucket_dir(name.bucket), exist_ok=True)
    Path(spool.bucket_dir(name.bucket), str(name)).write_text("{}")
    return name


def test_an_older_task_of_another_goes_before_our_younger_own(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    order = orders("hostA_1")
    old = put_for(spool, NOW - 5 * SECOND, order, mine=False)
    close = put_for(spool, NOW - 5 * SECOND + SPREAD // 2, order, mine=True)
    young = put_for(spool, NOW - 5 * SECOND + SPREAD * 2, order, mine=True)
    # Within SPREAD our own goes first; beyond it, the older one of another's.
    assert drain(index_of(spool, "hostA_1"), NOW) == [close, old, young]


def test_alone_the_order_is_oldest_first(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    tasks = [put(spool, NOW - i * MS) for i in range(50)]
    index = index_of(spool, "solo_1", [])
    assert drain(index, NOW) == sorted(tasks)


def test_peers_are_the_live_dispatching_records(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    stamp = "2027-01-15T08:00:00Z"

    def record(owner: str, **fields: object) -> None:
        doc: dict[str, object] = {"owner": owner, "host": owner.split("_")[0]}
        doc["updated_at"] = stamp
        doc |= {"clock_check": 10.0, "workers": 8, "dispatching": True, **fields}
        (run / f"{owner}.status").write_text(json.dumps(doc))

    record("a_1")
    record("b_2", dispatching=False)
    record("c_3", workers="8")
    record("d_4", updated_at="2027-01-15T07:00:00Z")  # an hour stale
    (run / "e_5.status").write_text("not json")
    from taskq.times.when import parse_when

    now = parse_when(stamp, 0) + SECOND
    assert live_peers(str(run), "me", now) == [Peer("a_1", 8)]
