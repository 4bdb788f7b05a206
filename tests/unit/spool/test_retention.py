"""Retention in-process: what tmp/ cleaning removes, by one rule for the daemon and fsck."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.client import request
from taskq.client.submit import submit
from taskq.spool import fsck, retention
from taskq.spool.keys import key_path
from taskq.spool.layout import Spool
from taskq.spool.task import Request
from taskq.times.clock import wall_us
from taskq.times.timespec import SECOND


def _abandoned(spool: Spool, key: str, age: int, now: int) -> tuple[str, str]:
    """A keyed submission cut short after its key was bound: its body back in tmp/, age old."""
    name, _ = submit(spool, request.body(Request(run_at=now, cwd="/", key=key), ["true"], now))
    tmp = spool.tmp_body(name.id)
    os.rename(spool.pending_path(name), tmp)
    os.utime(tmp, ((now - age) / SECOND, (now - age) / SECOND))
    return tmp, key_path(spool, key)


@pytest.mark.parametrize("by", ["daemon", "fsck"])
def test_an_abandoned_submission_goes_with_its_key_by_one_rule(tmp_path: Path, by: str) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    now = wall_us()
    old = _abandoned(spool, "old", retention.TMP_MAX_AGE, now)
    young = _abandoned(spool, "young", retention.TMP_MAX_AGE - SECOND, now)
    if by == "daemon":
        retention.clean_tmp(spool, now, retention.TMP_MAX_AGE)
    else:
        report = fsck.check(spool, now)
        assert [line for line in report.lines if "tmp/" in line] == [
            f"tmp/{os.path.basename(old[0])}: abandoned submission: removed"
        ]
    assert not any(os.path.exists(p) for p in old)
    assert all(os.path.exists(p) for p in young)
