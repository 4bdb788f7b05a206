"""Key files as hostile input: whatever bytes one holds, reading it gives a binding,
a ValueError or a CorruptFile, never another exception; a binding's window reads back."""

from __future__ import annotations

import errno
import os
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import CorruptFile
from taskq.spool import keys
from taskq.spool.keys import binding, read_binding
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, new_id

NAME = TaskName(0, new_id(0), 1, "default")


def test_a_binding_with_a_window_reads_back(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "k")
    with open(path, "wb") as f:
        f.write(binding(NAME, 1_800_000_000_000_000))
    name, until, seen = read_binding(path)
    assert (name, until) == (NAME, 1_800_000_000_000_000) and seen.startswith(str(NAME).encode())


@settings(max_examples=300, deadline=None)
@given(
    tail=st.one_of(
        st.binary(max_size=80),
        st.text(max_size=60).map(lambda t: f"until {t}\n".encode()),
    )
)
def test_a_hostile_key_file_is_refused_cleanly(tail: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k")
        with open(path, "wb") as f:
            f.write(f"{NAME}\n".encode() + tail)
        try:
            read_binding(path)
        except (ValueError, CorruptFile):
            pass


def _spool(tmp_path: os.PathLike[str]) -> tuple[Spool, str]:
    spool = Spool(str(tmp_path))
    os.makedirs(spool.keys)
    return spool, spool.key_path("0-abc")


def test_a_taker_breaks_a_marker_that_stands_unchanged(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spool, path = _spool(tmp_path)
    marker = os.path.join(spool.keys, ".0-abc.taking")
    os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))  # a killed taker's
    monkeypatch.setattr(keys, "TAKING_STALE", 0.2)
    began = time.monotonic()
    with keys.taking(spool, path):
        assert os.path.exists(marker)  # this taker's own, made anew
    assert time.monotonic() - began >= 0.2 and not os.path.exists(marker)
    assert sorted(os.listdir(spool.keys)) == []  # the broken one is gone too


def test_a_taker_gives_up_with_eagain_when_markers_keep_coming(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spool, path = _spool(tmp_path)
    marker = os.path.join(spool.keys, ".0-abc.taking")
    os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))
    monkeypatch.setattr(keys, "TAKING_LIMIT", 0.3)  # before the marker is stale (5 s)
    with pytest.raises(OSError) as caught, keys.taking(spool, path):
        raise AssertionError("taken while another's marker stood")
    assert caught.value.errno == errno.EAGAIN and "keys/0-abc is being taken over" in str(
        caught.value
    )
    assert os.path.exists(marker)  # not ours to remove


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "dangling symlink"])
def test_a_hostile_marker_is_broken_like_a_stale_one(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    spool, path = _spool(tmp_path)
    marker = os.path.join(spool.keys, ".0-abc.taking")
    target = os.path.join(tmp_path, "elsewhere")
    open(target, "w").close()
    {
        "directory": lambda: os.mkdir(marker),
        "fifo": lambda: os.mkfifo(marker),
        "symlink": lambda: os.symlink(target, marker),
        "dangling symlink": lambda: os.symlink(target + ".missing", marker),
    }[kind]()
    monkeypatch.setattr(keys, "TAKING_STALE", 0.1)
    with keys.taking(spool, path):
        assert os.path.isfile(marker) and not os.path.islink(marker)  # this taker's own
    assert not os.path.lexists(marker) and os.path.isfile(target)  # nothing followed
    assert [e for e in os.listdir(spool.keys) if e.endswith(".broken")] == []
