"""The load gate (atd -l, -b) with an injected load average and monotonic clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.daemon import loadgate
from taskq.daemon.loadgate import DEFAULT_INTERVAL, LOAD_READ, LoadGate

SECOND = 1_000_000


class Host:
    """A load average and a monotonic clock that the test moves."""

    def __init__(self) -> None:
        self.avg = 0.5
        self.now = 1000 * SECOND
        self.reads = 0

    def load(self) -> float:
        self.reads += 1
        return self.avg

    def mono(self) -> int:
        return self.now


def gate(host: Host, interval: int = DEFAULT_INTERVAL) -> LoadGate:
    return LoadGate({"batch": 1.5}, interval, host.load, host.mono)


def test_an_ungated_queue_is_always_open() -> None:
    host = Host()
    host.avg = 99.0
    g = gate(host)
    assert g.open("default") and g.wake_at() is None
    assert host.reads == 0  # no load read for a queue without a limit


def test_a_gated_queue_opens_below_its_limit_only() -> None:
    host = Host()
    g = gate(host)
    assert g.open("batch")
    host.avg, host.now = 1.5, host.now + LOAD_READ
    assert not g.open("batch")  # at the limit: closed, as atd's "below"
    assert g.wake_at() == host.now + LOAD_READ  # look again when the average next moves
    host.avg, host.now = 0.2, host.now + LOAD_READ
    assert g.open("batch") and g.wake_at() is None


def test_the_average_is_read_at_most_once_per_load_read() -> None:
    host = Host()
    g = gate(host)
    for _ in range(50):
        g.open("batch")
    assert host.reads == 1
    host.now += LOAD_READ
    g.open("batch")
    assert host.reads == 2


def test_starts_in_a_gated_queue_are_an_interval_apart() -> None:
    host = Host()
    g = gate(host, interval=60 * SECOND)
    assert g.open("batch")
    g.took("batch")
    assert not g.open("batch")  # the load is low, but the last start is too recent
    assert g.wake_at() == host.now + 60 * SECOND
    host.now += 60 * SECOND - 1
    assert not g.open("batch")
    host.now += 1
    assert g.open("batch")
    g.took("default")  # ungated queues keep no record
    assert g.open("default")


def test_the_load_is_proc_loadavg_s_first_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "loadavg"
    fake.write_text("0.42 0.30 0.20 1/99 4242\n")
    monkeypatch.setattr(loadgate, "LOADAVG", str(fake))
    assert loadgate.one_minute_load() == 0.42


def test_an_unreadable_load_keeps_the_gate_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(loadgate, "LOADAVG", str(tmp_path / "missing"))
    monkeypatch.setattr(os, "getloadavg", unreadable)
    assert loadgate.one_minute_load() == float("inf")
    assert not LoadGate({"batch": 1.5}).open("batch")
