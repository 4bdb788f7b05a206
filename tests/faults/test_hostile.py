"""Hostile and broken files anywhere in the spool: quarantined, never a crash or a stall.

Hypothesis makes the files (garbage bytes, truncated or mistyped task bodies,
odd names, oversized files, links) and drops them into pending buckets,
claimed/ and the spool root beside one valid task; a real daemon must keep
running and run the valid task, and what it met must end in corrupt/ with a
reason; fsck must then find the spool clean.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from conftest import Daemon, Taskq, wait_for
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from taskq.client.submit import submit
from taskq.spool.layout import Spool
from taskq.spool.task import DEFAULT_PATH, MAX_BODY, TaskBody, TaskName, bucket_of, new_id

VALID_BODY = json.loads(TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0).to_json())

contents = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda n: json.dumps(VALID_BODY)[:n].encode(), st.integers(0, 200)),  # truncated
    st.builds(  # right shape, wrong types
        lambda key, value: json.dumps({**VALID_BODY, key: value}).encode(),
        st.sampled_from(sorted(VALID_BODY)),
        st.one_of(
            st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
        ),
    ),
    st.just(b"HUGE"),  # stands for a file over MAX_BODY (kept out of reprs)
)
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
odd_names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=SURROGATES),
    min_size=1,
    max_size=60,
).filter(lambda s: not s.startswith("."))  # dot-names are strays, left alone (test_strays)
places = st.sampled_from(["bucket", "claimed", "root", "pending"])
hostile = st.lists(st.tuples(places, odd_names, contents, st.booleans()), min_size=1, max_size=6)


def drop(
    spool: Path, bucket: str, n: int, place: str, name: str, data: bytes, task_like: bool
) -> Path:
    """Write one hostile file; task_like gives it a valid task name (so only the body is bad)."""
    if task_like and place in ("bucket", "claimed"):
        name = str(TaskName(1_700_000_000_000_000 + n, new_id(0), 1))
        if place == "claimed":
            name += f"_started_20000101T000000.000000Z_{99999 + n}_elsewhere"
    directory = {
        "bucket": spool / "pending" / bucket,
        "claimed": spool / "claimed",
        "root": spool,
        "pending": spool / "pending",
    }[place]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.{n}"[-200:] if not task_like else directory / name
    if path.exists():
        return path
    path.write_bytes(b"{" * (MAX_BODY + 1) if data == b"HUGE" else data)
    return path


# No shrinking: each example runs a real daemon, and a failure's seed is printed.
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@pytest.mark.slow
@given(files=hostile)
def test_hostile_files_are_quarantined_and_the_daemon_carries_on(
    files: list[tuple[str, str, bytes, bool]],
) -> None:
    root = Path(tempfile.mkdtemp(prefix="taskq-hostile-"))
    try:
        tq = Taskq(root / "spool")
        spool = Spool(str(tq.spool))
        spool.init()
        now = time.time_ns() // 1000
        valid = submit(
            spool,
            TaskBody(
                id=new_id(now),
                argv=["true"],
                run_at=now,
                submitted_at=now,
                env={"PATH": DEFAULT_PATH},
            ),
        )[0].id
        bucket = bucket_of(1_700_000_000_000_000)
        dropped = [drop(tq.spool, bucket, n, *f) for n, f in enumerate(files)]
        (tq.spool / "pending" / bucket).mkdir(exist_ok=True)
        os.symlink("/etc/passwd", tq.spool / "pending" / bucket / str(TaskName(1, new_id(0), 1)))
        daemon = Daemon(
            tq, root / "daemon.log", "--host-id", "hostile", "--lease", "0.6s", "--rescan", "0.3s"
        )
        try:
            tq.wait_state(valid, ("done",), timeout=20)
            inside = [p for p in dropped if p.parent != tq.spool]
            wait_for(lambda: not any(p.exists() for p in inside), 15, "hostile files to go")
            assert daemon.proc.poll() is None, daemon.text()
        finally:
            daemon.stop()
        # fsck quarantines what the daemon never reads (the spool root); a
        # second pass then finds nothing more to quarantine.
        tq.run("fsck", check=False)
        again = json.loads(tq.run("fsck", "--dry-run", "--json", check=False).stdout)
        assert not [f for f in again["findings"] if "quarantine" in f], again
        assert all(p.read_text().count("\n") == 1 for p in (tq.spool / "corrupt").glob("*.reason"))
    finally:
        shutil.rmtree(root)


@pytest.mark.slow
def test_strays_are_left_alone(tq: Taskq, start_daemon: Any) -> None:
    """NFS silly-renames and FUSE hidden files: never run, never quarantined, never fsck'd."""
    spool = Spool(str(tq.spool))
    spool.init()
    now = time.time_ns() // 1000
    task = submit(
        spool,
        TaskBody(
            id=new_id(now), argv=["true"], run_at=now, submitted_at=now, env={"PATH": DEFAULT_PATH}
        ),
    )[0]
    bucket = tq.spool / "pending" / task.bucket
    strays = [
        bucket / ".nfs000000000123abcd00000001",
        tq.spool / "claimed" / f".nfs0000000000456{task}_started",
        tq.spool / "pending" / ".fuse_hidden0000000a00000001",
        tq.spool / ".nfs0000000000000abc00000002",
        tq.spool / "done" / ".nfs0000000000000def00000003",
    ]
    for path in strays:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(json.dumps({"argv": ["touch", "/tmp/never"]}).encode())
    daemon = start_daemon("--rescan", "0.2s", "--lease", "0.9s")
    tq.wait_state(task.id, ("done",))
    later = tq.submit("--in", "1s", "--", "true")  # a rescan and several claim scans later
    tq.wait_state(later, ("done",))
    assert all(p.exists() for p in strays)
    assert not list((tq.spool / "corrupt").iterdir()), daemon.text()
    report = json.loads(tq.run("fsck", "--dry-run", "--json", check=False).stdout)
    assert not report["findings"], report
