"""The mount table: parsed from mountinfo, and the filesystem a path is on."""

from __future__ import annotations

from pathlib import Path

from taskq.spool import mounts

TABLE = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,discard
30 22 0:26 / /dev/shm rw,nosuid shared:2 - tmpfs tmpfs rw
41 22 0:40 / {top}/net rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
42 22 0:41 / {top}/with\\040space rw - fuse.bindfs bindfs rw,user_id=0
43 41 8:2 / {top}/net/local rw - xfs /dev/sdb rw
44 41 0:42 / {top}/net rw - fuse.juicefs JuiceFS:x rw
25 22 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate
broken line without the separator
"""


def _table(tmp_path: Path) -> list[mounts.Mount]:
    info = tmp_path / "mountinfo"
    info.write_text(TABLE.format(top=tmp_path))
    return mounts.table(str(info))


def test_the_table_reads_types_points_escapes_and_options(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert len(table) == 7  # the broken line skipped
    spaced = next(m for m in table if m.fstype == "fuse.bindfs")
    assert spaced.point == f"{tmp_path}/with space" and "user_id=0" in spaced.options
    assert mounts.table(str(tmp_path / "absent")) == []


def test_a_path_is_on_its_deepest_mount_the_last_one_stacked_there(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for sub in ("net", "net/local", "with space"):
        (tmp_path / sub).mkdir(parents=True)
    assert mounts.fstype(str(tmp_path / "net" / "local" / "spool"), table) == "xfs"
    assert mounts.fstype(str(tmp_path / "net"), table) == "fuse.juicefs"  # stacked over nfs4
    assert mounts.fstype(str(tmp_path / "with space" / "s"), table) == "fuse.bindfs"
    assert mounts.fstype(str(tmp_path / "network"), table) == "ext4"  # not under net/
    assert mounts.fstype("/dev/shm/x", table) == "tmpfs"


def test_only_a_local_filesystem_stamps_times_by_this_hosts_clock(tmp_path: Path) -> None:
    here = mounts.fstype(str(tmp_path))
    assert mounts.clock_stamped_here(str(tmp_path)) == (here in mounts.LOCAL_TYPES)
    for remote in ("nfs", "nfs4", "fuse.bindfs", "fuse.glusterfs", "ceph", "cifs", "9p"):
        assert remote not in mounts.LOCAL_TYPES
