"""Key files as hostile input: whatever bytes one holds, reading it gives a binding,
a ValueError or a CorruptFile, never another exception; a binding's window reads back."""

from __future__ import annotations

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import CorruptFile
from taskq.spool.keys import binding, read_binding
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
