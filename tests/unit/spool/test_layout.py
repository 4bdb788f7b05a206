"""Spool.init on a made spool: nothing to do when whole, else the missing part made or refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.errors import CorruptFile
from taskq.spool.layout import DOORBELL, SUBDIRS, Spool


def made(tmp_path: Path) -> Spool:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    return spool


def test_a_whole_layout_is_left_as_it_is(tmp_path: Path) -> None:
    spool = made(tmp_path)
    os.chmod(spool.pending, 0o750)  # an operator's: init never resets a directory's mode
    spool.init()
    assert sorted(os.listdir(spool.root)) == sorted([*SUBDIRS, DOORBELL])
    assert os.stat(spool.pending).st_mode & 0o777 == 0o750


@pytest.mark.parametrize("gone", ["permits", "tmp", DOORBELL])
def test_a_directory_or_the_doorbell_gone_is_made_again(tmp_path: Path, gone: str) -> None:
    """A spool of an older version, or one an operator pruned, lacks a part: init makes it."""
    spool = made(tmp_path)
    path = Path(spool.root, gone)
    path.unlink() if gone == DOORBELL else path.rmdir()
    spool.init()
    assert path.is_file() if gone == DOORBELL else path.is_dir()


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_layout_directory_that_is_not_one_is_refused(tmp_path: Path, kind: str) -> None:
    spool = made(tmp_path)
    Path(spool.ids).rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if kind == "link":
        Path(spool.ids).symlink_to(elsewhere)
    else:
        Path(spool.ids).write_bytes(b"")
    with pytest.raises(CorruptFile, match="exists and is not a directory"):
        spool.init()
