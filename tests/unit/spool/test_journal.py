"""The journal reader takes every record its writers write, and only those."""

from __future__ import annotations

from pathlib import Path

from taskq.spool import journal
from taskq.spool.journal import Event


def test_records_the_writers_make_read_back(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "log")
    journal.append(log_dir, Event.MANUAL, 0, slot="2026-12-01T00:00:00Z", task="T", after=["A"])
    journal.append(log_dir, Event.PAUSED, 0, why="failures", failures=3, task=None)
    journal.append(log_dir, Event.SKIPPED, 0, slot="2026-12-01T00:00:00Z", why="skip")
    assert [r["event"] for r in journal.read(log_dir)] == ["manual", "paused", "skipped"]


def test_a_record_whose_known_field_has_a_wrong_type_is_skipped(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "log")
    journal.append(log_dir, Event.SKIPPED, 0, after=[1, 2])
    journal.append(log_dir, Event.START, 0, attempt="one")
    journal.append(log_dir, Event.START, 0, attempt=1, pid=None)
    assert [r.get("attempt") for r in journal.read(log_dir)] == [1]
