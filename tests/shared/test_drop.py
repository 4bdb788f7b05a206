"""The members' drop (taskq-spool(5) SHARED SPOOLS): submit, ask, read, through real users.

A spool made by `taskq init --shared`, a root daemon and two throwaway
members. Members write in drop/ only; the daemon files what they submit as
its own, runs it as them, and carries out their cancel, reschedule and
retry of their own tasks.
"""

from __future__ import annotations

import json
import pwd
import stat
from collections.abc import Iterator

import dropbed
import pytest
from conftest import wait_for
from dropbed import DEADLINE, NEEDS_USERS, Bed

pytestmark = [NEEDS_USERS, pytest.mark.slow]  # real users and a root daemon: seconds each


@pytest.fixture
def members() -> Iterator[tuple[str, str]]:
    yield from dropbed.make_members()


@pytest.fixture
def bed(members: tuple[str, str], others_taskq: list[str]) -> Iterator[Bed]:
    yield from dropbed.make_bed(members, others_taskq)


def test_init_shared_sets_up_who_writes_where(bed: Bed, members: tuple[str, str]) -> None:
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in bed.spool.iterdir() if p.is_dir()}
    assert modes["drop"] == 0o1730 and modes["replies"] == 0o2710 and modes["keys"] == 0o2710
    assert {m for name, m in modes.items() if name not in ("drop", "replies", "keys")} == {0o2750}
    assert all(p.stat().st_uid == 0 for p in bed.spool.iterdir())
    alice, _ = members
    for attempt in ("touch pending/x", "touch tmp/x", "mkdir deps/x", "touch doorbell", "ls drop"):
        proc = bed.shell_as(alice, f"cd {bed.spool} && {attempt}")
        assert proc.returncode != 0 and "ermission denied" in proc.stderr, attempt
    again = bed.tq.run("init", "--shared", bed.group, str(bed.spool)).stdout.decode()
    assert again.splitlines() == [
        f"shared spool {bed.spool} with group {bed.group}: members submit through drop/"
    ]
    assert bed.tq.run("fsck", "--dry-run").stdout.decode() == "fsck: 0 problem(s), 0 fixed\n"
    (bed.spool / "drop").chmod(0o1777)
    fsck = bed.tq.run("fsck", check=False).stdout.decode()
    assert "drop/ has mode 1777" in fsck and "set to 1730" in fsck
    assert stat.S_IMODE((bed.spool / "drop").stat().st_mode) == 0o1730


def test_a_members_task_is_filed_by_the_daemon_and_runs_as_the_member(
    bed: Bed, members: tuple[str, str]
) -> None:
    """Found at once by inotify on drop/ (no rescan, no polling), run as alice, hers to read."""
    alice, mallory = members
    bed.start_daemon("--rescan", "1h", "--doorbell-poll", "0")
    task = bed.submit_as(alice, "--", "sh", "-c", "id -un; echo secret")
    doc = json.loads(wait_for(lambda: _shown(bed, alice, task, "done"), DEADLINE, "her task"))
    assert [r["event"] for r in doc["attempts"]][:2] == ["filed", "start"]
    assert bed.taskq_as(alice, "logs", task).stdout == f"{alice}\nsecret\n"
    [path] = (bed.spool / "done").glob(f"*/*_{task}_*")
    info = path.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o640  # the daemon's, hers to read
    assert info.st_gid == pwd.getpwnam(alice).pw_gid
    assert not list((bed.spool / "drop").iterdir()) and not list((bed.spool / "pickup").iterdir())
    for args in (("show", task), ("logs", task)):
        proc = bed.taskq_as(mallory, *args)
        assert proc.returncode == 77 and "secret" not in proc.stdout, args
    listed = bed.taskq_as(mallory, "ls", "--json").stdout
    assert task in listed and "secret" not in listed


def test_members_cancel_reschedule_and_retry_their_own_tasks_only(
    bed: Bed, members: tuple[str, str]
) -> None:
    alice, mallory = members
    later = bed.submit_as(alice, "--in", "1h", "--", "true")
    failing = bed.submit_as(alice, "--max-attempts", "1", "--", "false")
    proc = bed.taskq_as(alice, "cancel", "--timeout", "1s", later)  # no daemon yet
    assert proc.returncode == 75 and proc.stderr.count("\n") == 1, proc.stderr
    assert "nothing was changed" in proc.stderr
    bed.start_daemon()
    wait_for(lambda: _shown(bed, alice, failing, "failed"), DEADLINE, "the failing task")
    for args in (("cancel", later), ("reschedule", "--in", "2h", later), ("retry", failing)):
        proc = bed.taskq_as(mallory, *args)
        assert proc.returncode == 77 and "is not yours" in proc.stderr, (args, proc.stderr)
    assert "is not yours" in bed.logged(f"from uid {bed.uid(mallory)}")
    moved = bed.taskq_as(alice, "reschedule", "--in", "2h", later)
    assert moved.returncode == 0 and moved.stdout.startswith(f"rescheduled {later} to "), moved
    retried = bed.taskq_as(alice, "retry", "--in", "1h", failing)
    assert retried.stdout.startswith(f"retrying {failing} as attempt 2 at "), retried
    assert bed.taskq_as(alice, "cancel", later).stdout == f"cancelled {later}\n"
    again = bed.taskq_as(alice, "cancel", later)
    assert again.returncode == 4 and "already cancelled" in again.stderr
    events = [
        r["event"] for r in json.loads(bed.tq.run("show", "--json", later).stdout)["attempts"]
    ]
    assert events == ["filed", "rescheduled", "cancelled"]  # journalled by root, hers to read


def test_keyed_submissions_answer_the_first_task(bed: Bed, members: tuple[str, str]) -> None:
    """A bound key is answered by submit itself; two racing before any pickup: the first wins."""
    alice, _ = members
    first = bed.submit_as(alice, "--key", "nightly", "--in", "1h", "--", "true")
    second = bed.submit_as(alice, "--key", "nightly", "--in", "1h", "--", "true")
    assert first != second  # no daemon has bound the key yet: each printed its own id
    bed.start_daemon()
    wait_for(lambda: _shown(bed, alice, first, "pending"), DEADLINE, "the first task")
    shown = bed.taskq_as(alice, "show", "--json", second)  # the second: its key's first task
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == first
    third = json.loads(
        bed.taskq_as(alice, "submit", "--json", "--key", "nightly", "--", "true").stdout
    )
    assert third == {**third, "id": first, "created": False}
    assert len(list((bed.spool / "pending").glob("*/*"))) == 1


def _shown(bed: Bed, user: str, task: str, state: str) -> str | None:
    proc = bed.taskq_as(user, "show", "--json", task)
    return (
        proc.stdout if proc.returncode == 0 and json.loads(proc.stdout)["state"] == state else None
    )


def test_submit_then_wait_works_before_any_pickup(bed: Bed, members: tuple[str, str]) -> None:
    """A submission still in the drop is shown as submitted, and waited for until it ends."""
    alice, _ = members
    task = bed.submit_as(alice, "--", "true")
    shown = bed.taskq_as(alice, "show", task)
    assert shown.returncode == 0 and "submitted" in shown.stdout, shown
    after = bed.submit_as(alice, "--after", task, "--", "true")  # its dependency is in the drop
    waiter = bed.spawn_as(alice, *bed.taskq, "wait", "--timeout", "60s", task, after)
    bed.start_daemon()
    out, err = waiter.communicate(timeout=90)
    assert waiter.returncode == 0 and out == f"{task} done\n{after} done\n", err


def test_a_members_priority_is_carried_and_key_takeovers_are_refused(
    bed: Bed, members: tuple[str, str]
) -> None:
    """--priority goes through the drop; --key-for and --on-key replace change nothing."""
    alice, _ = members
    for opts in (("--key-for", "1h"), ("--on-key", "replace")):
        refused = bed.taskq_as(alice, "submit", "--key", "k", *opts, "--in", "1h", "--", "true")
        assert refused.returncode == 2 and "not for a member" in refused.stderr
    assert list((bed.spool / "drop").iterdir()) == []  # nothing dropped
    task = bed.submit_as(alice, "--priority", "7", "--in", "1h", "--", "true")
    bed.start_daemon()
    wait_for(lambda: _shown(bed, alice, task, "pending"), DEADLINE, "the task filed")
    assert json.loads(bed.taskq_as(alice, "show", "--json", task).stdout)["priority"] == 7
    assert (bed.spool / "priorities").is_file()  # the daemon that filed it ranks the due
