"""Issue 23's ten shared-spool holes, each tried again on a spool `taskq init --shared` made.

Alice is the victim, mallory the attacker, both members; the daemon is
root's. Each attack is what the issue reproduced, or its nearest form now
that members write in drop/ only: either the kernel refuses it (mallory
may not write there), or the daemon refuses what he dropped and logs one
line naming it. Nothing of alice's is read, changed, cancelled, delayed,
resurrected or blocked, and the daemon runs on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import dropbed
import pytest
from conftest import wait_for
from dropbed import DEADLINE, NEEDS_USERS, Bed, cpu_seconds

from taskq.spool import drop, record
from taskq.spool.task import TaskBody, TaskName, bucket_of

pytestmark = [NEEDS_USERS, pytest.mark.slow]  # real users and a root daemon: seconds each
DENIED = "ermission denied"


@pytest.fixture
def members() -> Iterator[tuple[str, str]]:
    yield from dropbed.make_members()


@pytest.fixture
def bed(members: tuple[str, str], others_taskq: list[str]) -> Iterator[Bed]:
    yield from dropbed.make_bed(members, others_taskq)


def _body(task_id: str, **fields: object) -> TaskBody:
    now = time.time_ns() // 1000
    base = TaskBody(id=task_id, argv=["true"], run_at=now, submitted_at=now, cwd="/")
    return record.replace(base, **fields)


def _own(bed: Bed, user: str, **fields: object) -> tuple[str, bytes]:
    """A drop file `user` could make for himself: his own id and nonce, any body."""
    task_id, nonce = drop.member_id(bed.uid(user), time.time_ns() // 1000)
    body = _body(task_id, **fields)
    return f"{task_id}.task", drop.encode_submission(nonce, body)


def _denied(bed: Bed, user: str, script: str, *args: str) -> None:
    proc = bed.shell_as(user, f"cd {bed.spool} && {script}", *args)
    assert proc.returncode != 0 and DENIED in proc.stderr, (script, proc.stderr)


def _events(bed: Bed, task: str) -> list[str]:
    doc = json.loads(bed.tq.run("show", "--json", task).stdout)
    return [r["event"] for r in doc["attempts"]]


def _stub_sendmail(bed: Bed) -> dict[str, str]:
    bin_dir = bed.top / "bin"
    bin_dir.mkdir()
    (bin_dir / "sendmail").write_text(f"#!/bin/sh\ncat >> {bed.top / 'mailbox'}\n")
    (bin_dir / "sendmail").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_1_a_forged_expiring_id_leaks_nothing(bed: Bed, members: tuple[str, str]) -> None:
    """Mallory's task under alice's id, expired, MAILTO himself: refused before anything."""
    alice, mallory = members
    bed.start_daemon(env=_stub_sendmail(bed))
    secret = bed.submit_as(alice, "--in", "1h", "--", "sh", "-c", "echo alice-secret")
    dependent = bed.submit_as(alice, "--after", secret, "--", "true")
    bed.wait_state(dependent, ("waiting",))
    forged = TaskName(time.time_ns() // 1000, secret, 1, "default")
    _denied(
        bed, mallory, 'mkdir -p "pending/$1" && touch "pending/$1/$2"', forged.bucket, str(forged)
    )
    body = _body(secret, expires=1000, env={"MAILTO": mallory}, mail="always")
    bed.plant(mallory, *bed.forged_submission(mallory, body))
    line = bed.logged(f"task id {secret} was not made for uid {bed.uid(mallory)}")
    assert "quarantined" in line and "pickup/" in line
    assert bed.tq.state(secret) == "pending" and bed.tq.state(dependent) == "waiting"
    assert _events(bed, secret) == ["filed"]  # nothing expired, nothing told
    assert not (bed.top / "mailbox").exists()
    answer = json.loads((bed.spool / "replies" / f"{secret}.task").read_text())
    assert answer["status"] == 2 and "was not made for uid" in answer["message"]


def test_2_a_copy_of_an_ended_task_wedges_nothing(bed: Bed, members: tuple[str, str]) -> None:
    """Mallory drops again a task of his that failed, changed (a 1 ms deadline), then unchanged."""
    alice, mallory = members
    daemon = bed.start_daemon()
    name, data = _own(bed, mallory, argv=["false"], max_attempts=1)
    task = name.split(".")[0]
    bed.plant(mallory, name, data)
    bed.wait_state(task, ("failed",))
    changed = data.replace(b'"expires": null', b'"expires": 0.001')
    bed.plant(mallory, name, changed)
    assert "is taken by another task of yours" in bed.logged(f"refused drop/{name}")
    bed.plant(mallory, name, data)  # the very same submission again: filed once, not twice
    wait_for(lambda: not list((bed.spool / "drop").iterdir()), DEADLINE, "the drop to empty")
    rows = [json.loads(x) for x in bed.tq.run("ls", "--json").stdout.splitlines()]
    assert [r["state"] for r in rows if r["id"] == task] == ["failed"]
    later = bed.submit_as(alice, "--", "true")
    bed.wait_state(later, ("done",))
    assert "spool error" not in daemon.text() and daemon.proc.poll() is None


def test_4_members_cannot_write_dependency_markers(bed: Bed, members: tuple[str, str]) -> None:
    alice, mallory = members
    bed.start_daemon()
    first = bed.submit_as(alice, "--in", "1h", "--", "true")
    waits = bed.submit_as(alice, "--after", first, "--", "true")
    bed.wait_state(waits, ("waiting",))
    for attack in (
        f"touch deps/{first}/ended.done",
        f"touch deps/{first}/ended.failed",
        f"rm -f deps/{first}/*",
        "ln -s /root deps/" + "7" * 26,
        "mkdir deps/x",
    ):
        _denied(bed, mallory, attack)
    theirs = bed.submit_as(mallory, "--in", "1h", "--", "true")
    his = bed.submit_as(mallory, "--after", theirs, "--", "true")  # dependencies work for him
    bed.wait_state(his, ("waiting",))
    assert bed.taskq_as(mallory, "cancel", theirs).returncode == 0
    bed.wait_state(his, ("cancelled",))
    assert bed.tq.state(waits) == "waiting" and bed.tq.state(first) == "pending"


def test_5_no_link_where_a_layout_directory_goes(bed: Bed, members: tuple[str, str]) -> None:
    _, mallory = members
    _denied(bed, mallory, "mv ids ids.old")
    _denied(bed, mallory, "ln -s logs ids2")
    fsck = bed.tq.run("fsck", "--dry-run").stdout.decode()
    assert fsck == "fsck: 0 problem(s), 0 fixed\n"


def test_6_and_7_no_member_writes_tmp_or_keys(bed: Bed, members: tuple[str, str]) -> None:
    """Nothing planted in tmp/ or keys/: root's keys and schedules are root's alone."""
    _, mallory = members
    _denied(bed, mallory, "touch tmp/" + "7" * 26 + ".task")
    _denied(bed, mallory, "printf x > keys/0-" + "0" * 40)
    bed.tq.run("schedule", "add", "beat", "--every", "1s", "--", "true")
    bed.start_daemon()
    first = bed.tq.submit("--key", "K", "--in", "1h", "--", "true")
    assert bed.tq.submit("--key", "K", "--in", "1h", "--", "true") == first

    def slots() -> bool:
        shown = json.loads(bed.tq.run("schedule", "show", "beat", "--json").stdout)
        return len([o for o in shown["occurrences"] if o.get("outcome") == "done"]) >= 3

    wait_for(slots, 60, "three slots of the schedule to run")


def test_8_the_drop_cannot_keep_the_daemon_busy(bed: Bed, members: tuple[str, str]) -> None:
    """Junk, dot-files and unfinished files in drop/: set aside or left, no spinning."""
    alice, mallory = members
    past = bucket_of(time.time_ns() // 1000 - 3_600_000_000)
    _denied(bed, mallory, f"mkdir pending/{past}")
    _denied(bed, mallory, "touch doorbell")
    flood = (
        'cd "$1" && i=0; while [ $i -lt 200 ]; do : > "junk$i"; : > ".dot$i"; '
        ': > "$(printf %026d $i).task.part"; i=$((i+1)); done'
    )
    assert bed.shell_as(mallory, flood, str(bed.spool / "drop")).returncode == 0
    daemon = bed.start_daemon()
    task = bed.submit_as(alice, "--", "true")
    # Each junk file set aside is a sync: on a loaded disk 200 of them take long, and alice's
    # file may come after them all; what is judged here is that the daemon ends up idle.
    junk = lambda: len(list((bed.spool / "corrupt").glob("*.reason"))) >= 200  # noqa: E731
    wait_for(junk, 4 * DEADLINE, "the junk set aside")
    bed.wait_state(task, ("done",))
    before = cpu_seconds(daemon.proc.pid)
    started = time.monotonic()
    wait_for(lambda: time.monotonic() - started > 3, 10, "three idle seconds")
    assert cpu_seconds(daemon.proc.pid) - before < 1.0  # idle, not spinning on what was left


def test_9_no_decoy_defeats_a_cancel(bed: Bed, members: tuple[str, str]) -> None:
    alice, mallory = members
    marker = bed.scratch / "ran"
    task = bed.submit_as(alice, "--in", "1h", "--", "touch", str(marker))
    bed.start_daemon()
    bed.wait_state(task, ("pending",))
    earlier = TaskName(time.time_ns() // 1000, task, 1, "default")
    _denied(
        bed,
        mallory,
        f'mkdir -p pending/{earlier.bucket}; touch "pending/{earlier.bucket}/{earlier}"',
    )
    bed.plant(mallory, *bed.forged_submission(mallory, _body(task)))
    bed.logged(f"task id {task} was not made for uid")
    assert bed.tq.run("cancel", task).stdout.decode() == f"cancelled {task}\n"
    assert bed.tq.state(task) == "cancelled" and not marker.exists()


def test_10_a_name_forges_no_log_line(bed: Bed, members: tuple[str, str]) -> None:
    _, mallory = members
    daemon = bed.start_daemon()
    forged = "x\ntaskq[1]: started FAKE attempt 1"
    bed.plant(mallory, forged, b"{}")
    bed.logged("not a drop file name")
    assert not any(line.startswith("taskq[1]: started FAKE") for line in daemon.text().splitlines())
    assert "x\\ntaskq[1]" in daemon.text()


def test_3_one_file_crashes_nothing(bed: Bed, members: tuple[str, str]) -> None:
    """Bodies no submit would write, dropped by mallory under his own ids: each refused."""
    alice, mallory = members
    daemon = bed.start_daemon()
    cases = {
        "NUL in argv": {"argv": ["sh", "-c", "echo\0x"]},
        "NUL in cwd": {"cwd": "/tmp\0x"},
        "= in an env name": {"env": {"A=B": "x"}},
        "expires 9e307": {"expires": 9e307},
    }
    names = []
    for fields in cases.values():
        name, data = _own(bed, mallory)
        doc = json.loads(data.split(b"\n", 1)[1])
        doc.update(fields)
        bed.plant(mallory, name, data.split(b"\n", 1)[0] + b"\n" + json.dumps(doc).encode())
        names.append(name)
    name, data = _own(bed, mallory)
    deep = data.replace(b'"argv": [', b'"argv": ' + b"[" * 5000 + b"[", 1)
    bed.plant(mallory, name, deep)
    names.append(name)
    for name in names:
        assert "quarantined" in bed.logged(f"pickup/{name}")
    task = bed.submit_as(alice, "--", "true")
    bed.wait_state(task, ("done",))
    assert daemon.proc.poll() is None
