"""Permit tokens on real files: one taker wins, leases move by exact name, bad names are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.errors import ConfigError
from taskq.spool import config, permits
from taskq.spool.layout import Spool
from taskq.spool.permits import Lease, Permit, Ticket
from taskq.spool.task import TaskName, new_id
from taskq.times.timespec import MINUTE, SECOND

NOW = 1_800_000_000 * SECOND


def spool_at(tmp_path: Path) -> Spool:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    return spool


def lease(host: str = "a", expiry: int = NOW + MINUTE) -> Lease:
    return permits.lease_for(new_id(NOW), expiry, 42, host)


def test_one_taker_wins_a_permit_and_gives_it_back(tmp_path: Path) -> None:
    spool = spool_at(tmp_path)
    permit = Permit("queue", "reports", 0)
    mine, theirs = lease("a"), lease("b")
    assert permits.take(spool, permit, mine)
    assert not permits.take(spool, permit, theirs)
    assert permits.lease_of(spool, permit) == mine
    assert permits.listing(spool).in_use("queue", "reports") == 1
    assert not permits.give_back(spool, permit, theirs)  # not the lease it holds
    assert permits.give_back(spool, permit, mine)
    assert permits.listing(spool).held == frozenset()
    assert permits.take(spool, permit, theirs)
    assert os.listdir(spool.tmp) == []  # nothing left behind


def test_a_renewed_lease_is_no_longer_the_old_one(tmp_path: Path) -> None:
    spool = spool_at(tmp_path)
    permit = Permit("mutex", "db", 0)
    old = lease()
    assert permits.take(spool, permit, old)
    new = old._replace(expiry=old.expiry + MINUTE)
    permits.renew(spool, permit, old, new)
    with pytest.raises(FileNotFoundError):
        permits.renew(spool, permit, old, new._replace(expiry=new.expiry + 1))
    assert not permits.give_back(spool, permit, old)
    assert permits.lease_of(spool, permit) == new


def test_an_empty_permit_left_by_a_crash_is_free(tmp_path: Path) -> None:
    spool = spool_at(tmp_path)
    permit = Permit("queue", "q", 3)
    os.mkdir(os.path.join(spool.permits, str(permit)))
    assert permits.lease_of(spool, permit) is None
    assert permits.take(spool, permit, lease())


def test_names_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    spool = spool_at(tmp_path)
    held = lease("host.with_underscore")
    assert Lease.parse(str(held)) == held
    assert Permit.parse("rate_api.v2_9999") == Permit("rate", "api.v2", 9999)
    task = TaskName(NOW, new_id(NOW), 1, "q")
    assert Ticket.parse(str(Ticket("db", task))) == Ticket("db", task)
    for bad in ("queue_a_b_1", "lock_q_0", "queue_q_01", "queue_q_10000", "queue__0"):
        with pytest.raises(ValueError):
            Permit.parse(bad)
    for bad in ("x", f"{held.task_id}_soon_1_a", f"{held}/x"):
        with pytest.raises(ValueError):
            Lease.parse(bad)
    Path(spool.permits, "queue_q_x").mkdir()
    Path(spool.permits, "wait_db_nonsense").touch()
    Path(spool.permits, ".nfs0001").touch()  # a stray: not ours to judge
    assert sorted(permits.listing(spool).bad) == ["queue_q_x", "wait_db_nonsense"]
    permit = Permit("queue", "q", 0)
    Path(spool.permits, str(permit)).mkdir()
    Path(spool.permits, str(permit), "junk").touch()
    with pytest.raises(ValueError):
        permits.lease_of(spool, permit)


def test_tickets_list_oldest_task_first(tmp_path: Path) -> None:
    spool = spool_at(tmp_path)
    later = TaskName(NOW + SECOND, new_id(NOW), 1)
    sooner = TaskName(NOW, new_id(NOW), 1)
    for task in (later, sooner):
        permits.wait(spool, Ticket("db", task))
        permits.wait(spool, Ticket("db", task))  # idempotent
    assert permits.listing(spool).oldest_waiting("db") == sooner
    permits.unwait(spool, Ticket("db", sooner))
    assert permits.listing(spool).oldest_waiting("db") == later
    assert permits.listing(spool).oldest_waiting("other") is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[queues.a_b]\nlimit = 1\n", "queues.a_b"),
        ("[queues.q]\nlimit = 0\n", "limit must be"),
        ("[queues.q]\nlimit = true\n", "limit must be"),
        ("[queues.q]\nrate = 5\n", "rate must be"),
        ('[queues.q]\nrate = "5"\n', "rate must be"),
        ('[queues.q]\nrate = "0/1m"\n', "rate must be"),
        ('[queues.q]\nrate = "5/soon"\n', "rate must be"),
        ("[queues.q]\nlimits = 1\n", "takes only"),
        ('queues = "x"\n', "one table per queue"),
    ],
)
def test_bad_queue_tables_are_refused(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match=error):
        config.load(str(tmp_path)).queue_limits()


def test_queue_tables_are_read(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[queues.reports]\nlimit = 2\n[queues.api]\nrate = "10 / 1m"\n'
    )
    cfg = config.load(str(tmp_path))
    assert cfg.queue_limits() == {"reports": 2}
    assert cfg.queue_rates() == {"api": (10, MINUTE)}
