"""Smoke tests of the shared-filesystem beds in tests/substrates.py (bindfs, GlusterFS, CephFS,
MooseFS)."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, wait_for
from substrates import (
    RENAME_NOREPLACE,
    CephBed,
    GlusterBed,
    JuiceBed,
    MooseBed,
    mount_type,
    renameat2,
    wait_until,
)

from taskq.daemon.wakeups import Wakeups
from taskq.spool import mounts
from taskq.times.clock import STAMP_LAG, Clock, mono_us, wall_us
from taskq.times.timespec import MS, SECOND

pytest_plugins = ["substrates"]


def test_bindfs_refuses_rename_noreplace_but_renames(bindfs_dir: Path) -> None:
    assert (mount_type(bindfs_dir) or "").startswith("fuse")
    src, dst = bindfs_dir / "a", bindfs_dir / "b"
    src.write_text("x")
    with pytest.raises(OSError) as refused:
        renameat2(src, dst, RENAME_NOREPLACE)
    assert refused.value.errno == errno.EINVAL
    assert src.exists() and not dst.exists()
    os.rename(src, dst)
    assert sorted(os.listdir(bindfs_dir)) == ["b"]
    assert dst.read_text() == "x"


def test_a_daemon_on_a_fuse_spool_allows_for_the_clock_margin(bindfs_dir: Path) -> None:
    """A FUSE filesystem may pass on another host's file times: the 1 ms margin stays."""
    assert not mounts.clock_stamped_here(str(bindfs_dir))
    tq = Taskq(bindfs_dir / "spool")
    daemon = Daemon(tq, bindfs_dir.parent / "daemon.log", "--host-id", "fuse")
    try:
        record = wait_for(lambda: _record(tq), 30, "the daemon's record")
        assert 0.0008 < record["uncertainty"] - abs(record["offset"]) < 0.0012  # |offset| + 1 ms
    finally:
        daemon.stop()


def _record(tq: Taskq) -> dict[str, Any] | None:
    records = json.loads(tq.run("status", "--json").stdout)
    return records[0] if len(records) == 1 and "uncertainty" in records[0] else None


@pytest.mark.slow
def test_gluster_mounts_see_each_others_files(gluster: GlusterBed) -> None:
    assert len(gluster.mounts) == 3
    assert len({m.stat().st_dev for m in gluster.mounts}) == 3  # three separate clients
    for mnt in gluster.mounts:
        assert mount_type(mnt) == "fuse.glusterfs"
    views = gluster.fresh_dir("see-each-other")
    for i, writer in enumerate(views):
        (writer / f"from{i}").write_text(f"written through mount {i}")
    for reader in views:
        for i in range(len(views)):
            path = reader / f"from{i}"
            wait_until(path.exists, what=f"{path}")
            assert path.read_text() == f"written through mount {i}"
        assert sorted(os.listdir(reader)) == ["from0", "from1", "from2"]


def test_gluster_rename_noreplace_is_recorded(
    gluster: GlusterBed, record_property: Callable[[str, object], None]
) -> None:
    a, b = gluster.fresh_dir("noreplace")[:2]
    (a / "src").write_text("s")
    (a / "taken").write_text("t")
    try:
        renameat2(a / "src", a / "dst", RENAME_NOREPLACE)
    except OSError as e:
        assert e.errno == errno.EINVAL, e
        outcome = "refused with EINVAL"
        assert (a / "src").exists() and not (a / "dst").exists()
    else:
        outcome = "supported"
        with pytest.raises(FileExistsError):
            renameat2(b / "dst", b / "taken", RENAME_NOREPLACE)
        assert (b / "taken").read_text() == "t"
    record_property("gluster_rename_noreplace", outcome)
    print(f"GlusterFS renameat2(RENAME_NOREPLACE): {outcome}")


@pytest.mark.slow
def test_gluster_rename_race_has_one_winner(gluster: GlusterBed) -> None:
    """One source renamed at once through two mounts to two names: one wins, one gets ENOENT."""
    maker, left, right = gluster.fresh_dir("race")
    rounds = 200
    for n in range(rounds):
        (maker / f"src{n}").write_text(str(n))
        barrier = threading.Barrier(2)
        results: dict[str, BaseException | None] = {}
        threads = [
            threading.Thread(target=_rename, args=(view / f"src{n}", view / dst, barrier, results))
            for view, dst in ((left, f"left{n}"), (right, f"right{n}"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcome = {Path(dst).name: err for dst, err in results.items()}
        winners = [dst for dst, err in outcome.items() if err is None]
        losers = [err for err in outcome.values() if err is not None]
        assert len(winners) == 1, f"round {n}: {outcome}"
        assert len(losers) == 1, f"round {n}: {outcome}"
        assert isinstance(losers[0], FileNotFoundError), f"round {n}: {outcome}"
        names = sorted({f"src{n}", f"left{n}", f"right{n}"}.intersection(os.listdir(maker)))
        assert names == [winners[0]], f"round {n}: {names} after {outcome}"
        assert (maker / winners[0]).read_text() == str(n)


def _rename(
    src: Path, dst: Path, barrier: threading.Barrier, results: dict[str, BaseException | None]
) -> None:
    try:
        barrier.wait(60)
        os.rename(src, dst)
    except BaseException as e:
        results[str(dst)] = e
    else:
        results[str(dst)] = None


@pytest.mark.slow
def test_cephfs_clients_are_coherent_and_refuse_to_replace(cephfs: CephBed) -> None:
    """Three ceph-fuse clients: RENAME_NOREPLACE refuses an existing name, a rename onto a
    directory that is not empty fails (what permits need), and what one client renames away
    is gone through another at once."""
    assert len({m.stat().st_dev for m in cephfs.mounts}) == 3  # three separate clients
    assert all(mount_type(m) == "fuse.ceph-fuse" for m in cephfs.mounts)
    a, b, c = cephfs.fresh_dir("coherent")
    (a / "src").write_text("s")
    (a / "taken").write_text("t")
    with pytest.raises(FileExistsError):
        renameat2(b / "src", b / "taken", RENAME_NOREPLACE)
    assert (c / "taken").read_text() == "t"
    renames_as_permits_and_claims_need(a, b, c)
    assert (c / "moved").read_text() == "s"


@pytest.mark.slow
def test_moosefs_clients_share_one_clock_in_whole_seconds(moosefs: MooseBed) -> None:
    """Three mfsmount clients: what one writes the others see, RENAME_NOREPLACE is refused
    (EINVAL) where the kernel cannot see the target, a rename onto a directory that is not
    empty fails (what permits need), and a write is stamped in whole seconds."""
    assert len({m.stat().st_dev for m in moosefs.mounts}) == 3  # three separate clients
    assert all(mount_type(m) == "fuse" for m in moosefs.mounts)
    a, b, c = moosefs.fresh_dir("coherent")
    (a / "src").write_text("s")
    assert (c / "src").read_text() == "s"
    with pytest.raises(OSError) as refused:
        renameat2(b / "src", b / "new", RENAME_NOREPLACE)
    assert refused.value.errno == errno.EINVAL
    renames_as_permits_and_claims_need(a, b, c)
    stamps: list[int] = []
    for view in (a, b, c):  # one file each: a file another client writes is locked a while
        with open(view / f"stamped-{len(stamps)}", "wb") as f:
            f.write(b"x")
            stamps.append(os.fstat(f.fileno()).st_mtime_ns)
    assert all(ns % 1_000_000_000 == 0 for ns in stamps), stamps


@pytest.mark.slow
def test_the_clock_probe_on_juicefs_measures_its_writes_not_the_last_close(
    juicefs: JuiceBed,
) -> None:
    """JuiceFS's client stamps a write's mtime at close: fstat after a write shows the last
    close's, which would put us ahead by the time since the last measurement."""
    clock = Clock()
    probe = str(juicefs.fresh_dir("clock")[0] / "probe")
    clock.measure(probe)
    time.sleep(1.0)  # the stale stamp would be a second old
    assert -MS <= clock.measure(probe) < 500 * MS
    assert clock.trusted()


@pytest.mark.slow
def test_the_clock_probe_narrows_whole_second_stamps_to_milliseconds(moosefs: MooseBed) -> None:
    """A host 250 ms ahead of the master: one measurement knows it only within a second, a
    dozen aimed ones (as the clock guard times them) far closer, never excluding it (the
    master's stamps may lag its clock by up to STAMP_LAG)."""
    skew = 250 * MS
    clock = Clock(wall=lambda: wall_us() + skew)
    probe = str(moosefs.fresh_dir("clock")[0] / "probe")
    clock.measure(probe)
    assert clock.coarse
    seen = [(clock.low, clock.offset)]
    for _ in range(14):
        at = clock.aim(clock.mono() + 100 * MS)
        while clock.mono() < at:
            time.sleep(max(0, at - clock.mono()) / SECOND)
        clock.measure(probe)
        seen.append((clock.low, clock.offset))
        assert clock.low - STAMP_LAG <= skew <= clock.offset + MS, seen
    # A few ms on an idle machine; a loaded one wakes late and narrows it less.
    assert clock.offset - clock.low < 500 * MS, seen
    assert clock.reference(clock.now()) >= wall_us() - MS  # leases are never cut short


@pytest.mark.slow
def test_a_second_ring_in_the_same_whole_second_is_heard(moosefs: MooseBed) -> None:
    """Another host rings the doorbell twice within one second: the master stamps both the
    same, and the poll hears both; a second and a little after the last, it hears none."""
    a, b, _ = moosefs.fresh_dir("bell")
    (a / "doorbell").touch()
    bell = Wakeups(str(a / "doorbell"), 1, mono_us)
    for _ in range(5):
        time.sleep(1.02 - time.time() % 1)  # just after the master's second turns
        second = int(time.time())
        os.utime(b / "doorbell")
        assert bell.wait(5)[0], "the first ring"
        os.utime(b / "doorbell")
        if int(time.time()) == second:
            break
    else:
        pytest.skip("too slow to ring twice within one second")
    assert bell.wait(5)[0], "the second ring, stamped as the first was"
    time.sleep((SECOND + STAMP_LAG) / SECOND)
    assert not bell.wait(0.5)[0], "no ring heard once the second is over"


def renames_as_permits_and_claims_need(a: Path, b: Path, c: Path) -> None:
    """Through three clients' views of one directory (holding a file `src`): a rename onto
    a directory that is not empty fails (what permits need), and a name renamed away by one
    client cannot be renamed again by another that had it cached (what claims need)."""
    (a / "d1").mkdir()
    (a / "d2").mkdir()
    (a / "d2" / "lease").touch()
    with pytest.raises(OSError) as full:
        os.rename(b / "d1", b / "d2")
    assert full.value.errno in (errno.ENOTEMPTY, errno.EEXIST)
    os.stat(c / "src")  # c has it cached
    os.rename(a / "src", a / "moved")
    with pytest.raises(FileNotFoundError):
        os.rename(c / "src", c / "again")
