"""A spool shared the old way against its own members: issue 16's five attacks, through real users.

A root-owned spool shared by a group as taskq once documented it, before
drop/ (members writing tmp/, pending/ and keys/ themselves; taskq-daemon(8)
BUGS says such a spool is still served, with its old limits), a root
daemon, and two throwaway members: alice, the victim, and mallory, who does
what any member can do with a shell (cp, sed, mv, ln -s, mkfifo) in the
directories the group may write. The daemon's defences in depth must still
hold there: each attack gains nothing, and the daemon logs a one-line
reason where it saw something hostile. (A spool `taskq init --shared`
makes: test_drop.py and test_drop_holes.py.)
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import dropbed
import pytest
from conftest import Taskq
from dropbed import DEADLINE, NEEDS_USERS, Bed

from taskq.spool.task import TaskName, bucket_of
from taskq.times.timespec import format_iso

pytestmark = NEEDS_USERS
RESCAN = ("--rescan", "1s")  # members' renames ring no doorbell: a short rescan finds them soon


@pytest.fixture
def members() -> Iterator[tuple[str, str]]:
    yield from dropbed.make_members()


def share_the_old_way(tq: Taskq, group: str) -> None:
    """tmp/, pending/ and keys/ 3770 to the group, the rest 2750, as taskq once documented."""
    gid = grp.getgrnam(group).gr_gid
    tq.submit("--in", "1d", "--", "true")  # root makes the layout
    for directory, _, _ in os.walk(tq.spool):
        path = Path(directory)
        writable = path == tq.spool or path.relative_to(tq.spool).parts[0] in (
            "tmp",
            "pending",
            "keys",
        )
        os.chown(path, 0, gid)
        os.chmod(path, 0o3770 if writable else 0o2750)
    os.chown(tq.spool / "doorbell", 0, gid)
    os.chmod(tq.spool / "doorbell", 0o660)


@pytest.fixture
def shared(members: tuple[str, str], others_taskq: list[str]) -> Iterator[Bed]:
    """A spool shared the old way, run by root."""
    yield from dropbed.make_bed(members, others_taskq, share_the_old_way)


@pytest.mark.slow
def test_a_forged_id_reads_nothing_of_its_owner(shared: Bed, members: tuple[str, str]) -> None:
    """Attack 1: mallory copies alice's id into a task of his own; it is refused, never run."""
    alice, mallory = members
    shared.start_daemon(*RESCAN)
    secret = shared.submit_as(alice, "--", "sh", "-c", "echo alice-secret")
    shared.tq.wait_state(secret, ("done",), DEADLINE)
    stolen = shared.scratch / "stolen"
    # His own task, far off, whose command copies the output of its id's first attempt.
    steal = f'cat "$TASKQ_SPOOL/logs/$TASKQ_ID/1.out" > {stolen}; echo mallory-was-here'
    own = shared.submit_as(mallory, "--in", "1d", "--", "sh", "-c", steal)
    body = shared.pending_file(own)
    forged = TaskName(time.time_ns() // 1000, secret, 1, "default")
    shared.run_script_as(
        mallory,
        'sed "s/$1/$2/" "$3" > "$4/tmp/forged"; chmod 600 "$4/tmp/forged"; '
        'mkdir -p "$4/pending/$5"; mv "$4/tmp/forged" "$4/pending/$5/$6"',
        own,
        secret,
        str(body),
        str(shared.spool),
        forged.bucket,
        str(forged),
    )
    line = shared.logged(f"belongs to uid {pwd.getpwnam(alice).pw_uid}")
    assert secret in line and "quarantined" in line
    assert not stolen.exists()
    log_dir = shared.spool / "logs" / secret
    assert (log_dir / "1.out").read_text() == "alice-secret\n"
    starts = [
        r
        for r in map(json.loads, (log_dir / "journal").read_text().splitlines())
        if r["event"] == "start"
    ]
    assert len(starts) == 1  # nothing of his in her journal
    shown = shared.taskq_as(mallory, "logs", secret)
    assert "alice-secret" not in shown.stdout and "mallory-was-here" not in shown.stdout


@pytest.mark.slow
def test_a_symlinked_bucket_is_never_followed(shared: Bed, members: tuple[str, str]) -> None:
    """Attack 2: a bucket that links to cancelled/ (or anywhere) is set aside, never run from."""
    alice, mallory = members
    ran = shared.scratch / "ran"
    cancelled = shared.submit_as(alice, "--in", "2s", "--", "touch", str(ran))
    shared.tq.run("cancel", cancelled)  # by root (members cannot), before any daemon runs
    bucket = bucket_of(time.time_ns() // 1000 - 3_600_000_000)  # any past minute will do
    shared.run_script_as(mallory, 'ln -s ../cancelled "$1/pending/$2"', str(shared.spool), bucket)
    shared.start_daemon(*RESCAN)
    line = shared.logged(f"quarantined pending/{bucket}")
    assert "symbolic link" in line
    later = shared.submit_as(alice, "--", "true")  # the daemon runs on
    shared.tq.wait_state(later, ("done",), DEADLINE)
    assert shared.tq.state(cancelled) == "cancelled" and not ran.exists()
    # A link where a task is moved back to pending: root renames into a real bucket.
    moved = shared.submit_as(alice, "--in", "1d", "--", "true")
    to = TaskName.parse(shared.pending_file(moved).name).run_at + 3_600_000_000
    target = bucket_of(to)
    shared.run_script_as(mallory, 'ln -s /root "$1/pending/$2"', str(shared.spool), target)
    proc = shared.tq.run("reschedule", "--at", format_iso(to), moved)
    assert "symbolic link" in proc.stderr.decode()
    path = shared.pending_file(moved)
    assert not path.parent.is_symlink() and path.parent.name == target
    assert not any(p.name.endswith(moved) for p in Path("/root").iterdir())


@pytest.mark.slow
def test_a_fifo_key_file_hangs_nothing(shared: Bed, members: tuple[str, str]) -> None:
    """Attack 3: FIFOs as key files, named by a stale tmp/ file: the cleaner and fsck go on."""
    alice, mallory = members
    uid = pwd.getpwnam(mallory).pw_uid
    digest = hashlib.sha256(b"jam").hexdigest()[:40]
    own = shared.submit_as(mallory, "--in", "1d", "--", "true")
    shared.run_script_as(
        mallory,
        'sed "s/\\"key\\": null/\\"key\\": \\"jam\\"/" "$1" > "$2/tmp/$3.task"; '
        'chmod 600 "$2/tmp/$3.task"; touch -d "2 hours ago" "$2/tmp/$3.task"; '
        'mkfifo "$2/keys/$4" "$2/keys/$5-$4"',
        str(shared.pending_file(own)),
        str(shared.spool),
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        digest,
        str(uid),
    )
    fsck = shared.tq.run("fsck", "--dry-run", check=False)  # would block in open() for good
    assert f"keys/{digest}: not a key file" in fsck.stdout.decode()
    daemon = shared.start_daemon(*RESCAN)
    line = shared.logged(f"removed keys/{uid}-{digest}")
    assert "not a regular file" in line
    shared.logged(f"removed keys/{digest}")
    assert not (shared.spool / "tmp" / "7ZZZZZZZZZZZZZZZZZZZZZZZZZ.task").exists()
    task = shared.submit_as(alice, "--", "true")
    shared.tq.wait_state(task, ("done",), DEADLINE)
    assert daemon.stop() == 0  # SIGTERM is heard


@pytest.mark.slow
def test_a_squatted_key_blocks_no_one(shared: Bed, members: tuple[str, str]) -> None:
    """Attack 4: key files planted under alice's key: her submit is never answered by his task."""
    alice, mallory = members
    digest = hashlib.sha256(b"nightly").hexdigest()[:40]
    bait = shared.submit_as(mallory, "--in", "1d", "--", "true")
    name = shared.pending_file(bait).name
    alice_uid = pwd.getpwnam(alice).pw_uid
    plant = 'printf "%s\\n" "$3" > "$1/keys/$2"; chmod 644 "$1/keys/$2"'
    shared.run_script_as(mallory, plant, str(shared.spool), digest, name)  # the unscoped name
    first = json.loads(
        shared.taskq_as(alice, "submit", "--json", "--key", "nightly", "--", "true").stdout
    )
    assert first["created"] is True and first["id"] != bait
    # The same, under the name her key file has now: refused (75) until the daemon removes it.
    squat = f"{alice_uid}-{hashlib.sha256(b'weekly').hexdigest()[:40]}"
    shared.run_script_as(mallory, plant, str(shared.spool), squat, name)
    proc = shared.taskq_as(alice, "submit", "--key", "weekly", "--", "true")
    assert proc.returncode == 75 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"keys/{squat}" in proc.stderr and "owned by uid" in proc.stderr
    shared.start_daemon(*RESCAN)
    line = shared.logged(f"removed keys/{squat}")
    assert f"not by uid {alice_uid}" in line
    again = json.loads(
        shared.taskq_as(alice, "submit", "--json", "--key", "weekly", "--", "true").stdout
    )
    assert again["created"] is True and again["id"] != bait
    shared.tq.wait_state(again["id"], ("done",), DEADLINE)
    assert shared.tq.state(bait) == "pending"


@pytest.mark.slow
def test_an_unreadable_bucket_breaks_no_ones_commands(
    shared: Bed, members: tuple[str, str]
) -> None:
    """Attack 5: a private bucket and a link to a private directory: others' commands work."""
    alice, mallory = members
    mine = shared.submit_as(alice, "--in", "1d", "--", "true")
    other = shared.submit_as(alice, "--in", "1d", "--", "true")
    hidden = bucket_of(time.time_ns() // 1000 + 7_200_000_000)
    linked = bucket_of(time.time_ns() // 1000 + 10_800_000_000)
    shared.run_script_as(
        mallory,
        'mkdir -m 700 "$1/pending/$2"; ln -s /root "$1/pending/$3"',
        str(shared.spool),
        hidden,
        linked,
    )
    for args in (("ls",), ("show", mine), ("reschedule", "--in", "2d", other)):
        proc = shared.taskq_as(alice, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert f"skipped pending/{hidden}: Permission denied" in proc.stderr
        assert f"skipped pending/{linked}: a symbolic link, never followed" in proc.stderr
    # Members cannot cancel (cancelled/ is the daemon's); root's cancel skips the link too.
    cancelled = shared.tq.run("cancel", mine)
    assert f"skipped pending/{linked}: a symbolic link" in cancelled.stderr.decode()
    assert shared.tq.state(mine) == "cancelled"
    assert shared.tq.state(other) == "pending"
    shared.start_daemon(*RESCAN)
    assert "symbolic link" in shared.logged(f"quarantined pending/{linked}")


def test_a_fifo_as_config_toml_hangs_no_command(tq: Taskq) -> None:
    """Where root has not made config.toml, a member may make it a FIFO: refused, not waited on."""
    tq.submit("--in", "1d", "--", "true")
    os.mkfifo(tq.spool / "config.toml")
    proc = tq.run("submit", "--", "true", check=False)  # (run() times out after 60 s)
    assert proc.returncode == 78 and proc.stderr.count(b"\n") == 1
    assert b"config.toml" in proc.stderr and b"not a regular file" in proc.stderr
