"""Times the at(1) way through the real CLI and real daemons: local, at-style, DST, --local."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import Daemon, Taskq, read_stamps, stamp_cmd

StartDaemon = Callable[..., Daemon]
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def berlin(tq: Taskq) -> Taskq:
    """The taskq CLI as run by a user in Berlin."""
    return Taskq(tq.spool, env={"TZ": "Europe/Berlin"})


def _submitted(tq: Taskq, *args: str) -> dict[str, datetime]:
    """Submit; the stored run_at and submitted_at, as Berlin wall times."""
    doc = json.loads(tq.run("submit", "--json", *args, "--", "true").stdout)
    shown = tq.show(doc["id"])
    assert shown["run_at"] == doc["run_at"] and shown["run_at"].endswith("Z")  # stored as UTC
    return {k: _berlin(shown[k]) for k in ("run_at", "submitted_at")}


def _berlin(iso: str) -> datetime:
    return datetime.fromisoformat(iso).astimezone(BERLIN)


def _wall(d: date, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime.combine(d, time(hour, minute, second), tzinfo=BERLIN)


def _next(now: datetime, hour: int, minute: int = 0) -> datetime:
    """The next hour:minute in Berlin after now (the current minute has passed, as in at)."""
    today = _wall(now.date(), hour, minute)
    return (
        today
        if today > now.replace(second=0, microsecond=0)
        else _wall(now.date() + timedelta(days=1), hour, minute)
    )


@pytest.mark.slow
def test_a_naive_local_time_starts_at_its_utc_instant(
    berlin: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    # The daemon runs in UTC; the submitter's Berlin time is resolved at submit.
    start_daemon(env={"TZ": "UTC"})
    when = (datetime.now(BERLIN) + timedelta(seconds=3)).replace(microsecond=0)
    wall = when.strftime("%Y-%m-%d %H:%M:%S")
    task_id = berlin.submit("--at", wall, "--", *stamp_cmd(stamps))
    doc = berlin.wait_state(task_id, ("done",), timeout=60)
    instant = when.astimezone(UTC)
    assert doc["run_at"] == instant.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    [(_, _, started)] = read_stamps(stamps)
    assert started >= instant.timestamp()  # never early: at the UTC instant, not an hour off


@pytest.mark.slow
def test_a_clock_time_of_today_runs_today(
    berlin: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    start_daemon()
    when = (datetime.now(BERLIN) + timedelta(seconds=3)).replace(microsecond=0)
    task_id = berlin.submit("--at", when.strftime("%H:%M:%S"), "--", *stamp_cmd(stamps))
    doc = berlin.wait_state(task_id, ("done",), timeout=60)
    assert _berlin(doc["run_at"]) == when
    [(_, _, started)] = read_stamps(stamps)
    assert started >= when.timestamp()


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("09:00", lambda now: _next(now, 9)),
        ("9:00 tomorrow", lambda now: _wall(now.date() + timedelta(days=1), 9)),
        ("tomorrow 17:45:30", lambda now: _wall(now.date() + timedelta(days=1), 17, 45, 30)),
        ("2027-01-15 09:30", lambda now: _wall(date(2027, 1, 15), 9, 30)),
        ("2027-07-15 09:30", lambda now: _wall(date(2027, 7, 15), 9, 30)),  # summer time
        ("2027-07-15T09:30", lambda now: _wall(date(2027, 7, 15), 9, 30)),
        ("noon", lambda now: _next(now, 12)),
        ("midnight", lambda now: _next(now, 0)),
        ("teatime", lambda now: _next(now, 16)),
        ("noon tomorrow", lambda now: _wall(now.date() + timedelta(days=1), 12)),
        ("2027-07-15T09:30:00+02:00", lambda now: _wall(date(2027, 7, 15), 9, 30)),
        ("@1800000000", lambda now: datetime.fromtimestamp(1_800_000_000, BERLIN)),
    ],
)
@pytest.mark.slow
def test_at_style_forms_store_the_right_run_at(
    berlin: Taskq, form: str, expected: Callable[[datetime], datetime]
) -> None:
    got = _submitted(berlin, "--at", form)
    assert got["run_at"] == expected(got["submitted_at"])


@pytest.mark.parametrize(
    ("form", "elapsed"),
    [
        ("now + 30 minutes", timedelta(minutes=30)),
        ("now + 2 hours", timedelta(hours=2)),
        ("now + 1 min", timedelta(minutes=1)),
    ],
)
@pytest.mark.slow
def test_now_plus_minutes_and_hours_is_elapsed_time(
    berlin: Taskq, form: str, elapsed: timedelta
) -> None:
    got = _submitted(berlin, "--at", form)
    assert got["run_at"] - got["submitted_at"] == elapsed


@pytest.mark.slow
@pytest.mark.parametrize(("form", "days"), [("now + 3 days", 3), ("now + 2 weeks", 14)])
def test_now_plus_days_keeps_the_wall_time(berlin: Taskq, form: str, days: int) -> None:
    got = _submitted(berlin, "--at", form)
    submitted = got["submitted_at"]
    wall = datetime.combine(submitted.date() + timedelta(days=days), submitted.time())
    assert got["run_at"] == wall.replace(tzinfo=BERLIN)


@pytest.mark.slow
def test_reschedule_retry_and_batch_take_the_same_forms(berlin: Taskq, tmp_path: Path) -> None:
    task_id = berlin.submit("--in", "1h", "--", "true")
    out = berlin.run("reschedule", "--local", task_id, "--at", "teatime tomorrow").stdout.decode()
    tomorrow = datetime.now(BERLIN).date() + timedelta(days=1)
    assert _berlin(berlin.show(task_id)["run_at"]) == _wall(tomorrow, 16)
    assert out.strip().endswith(_wall(tomorrow, 16).isoformat(timespec="microseconds"))
    batch = tmp_path / "batch.ndjson"
    batch.write_text('{"command": ["true"], "run_at": "2027-07-15 09:30"}\n')
    [line_id] = berlin.run("submit", "--batch", str(batch)).stdout.decode().split()
    assert _berlin(berlin.show(line_id)["run_at"]) == _wall(date(2027, 7, 15), 9, 30)


@pytest.mark.slow
def test_failed_task_retried_at_a_local_time(berlin: Taskq, start_daemon: StartDaemon) -> None:
    start_daemon()
    task_id = berlin.submit("--max-attempts", "1", "--", "false")
    berlin.wait_state(task_id, ("failed",), timeout=60)
    out = berlin.run("retry", "--local", task_id, "--at", "2027-01-15 09:30").stdout.decode()
    assert out.strip().endswith(" at 2027-01-15T09:30:00.000000+01:00")
    assert _berlin(berlin.show(task_id)["run_at"]) == _wall(date(2027, 1, 15), 9, 30)
    # The daemons' records, in status and stats, follow the same setting.
    offset = datetime.now(BERLIN).strftime("%z")
    local = f"{offset[:3]}:{offset[3:]}"
    for command in ("status", "stats"):
        updated = berlin.run(command, "--local").stdout.decode().split("updated ")[1].split()[0]
        assert updated.endswith(local), updated
        updated = berlin.run(command).stdout.decode().split("updated ")[1].split()[0]
        assert updated.endswith("Z"), updated


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ("2027-03-28 02:30", "taskq: 2027-03-28 02:30:00 does not exist in Europe/Berlin"),
        ("2027-10-31 02:30", "taskq: 2027-10-31 02:30:00 happens twice in Europe/Berlin"),
        ("half past nine", "taskq: bad time 'half past nine': not a time; use e.g. 09:00"),
    ],
)
def test_dst_gaps_repeats_and_nonsense_are_one_line_errors(
    berlin: Taskq, form: str, message: str
) -> None:
    done = berlin.run("submit", "--at", form, "--", "true", check=False)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith(message) and err.count("\n") == 1
    assert not list((berlin.spool / "pending").glob("*/*"))


@pytest.mark.slow
def test_listings_are_utc_unless_asked_for_local(berlin: Taskq) -> None:
    task_id = berlin.submit("--at", "2027-07-15 09:30", "--", "true")
    assert "2027-07-15T07:30:00.000Z" in berlin.run("ls").stdout.decode()
    local = "2027-07-15T09:30:00.000+02:00"
    assert local in berlin.run("ls", "--local").stdout.decode()
    as_env = Taskq(berlin.spool, env={"TZ": "Europe/Berlin", "TASKQ_TIMEFMT": "local"})
    assert local in as_env.run("ls").stdout.decode()
    assert "2027-07-15T07:30:00.000Z" in as_env.run("ls", "--utc").stdout.decode()
    shown = as_env.run("show", task_id).stdout.decode()
    assert "run_at:    2027-07-15T09:30:00.000000+02:00" in shown
    assert "Z" not in shown.split("submitted:")[1].split()[0]
    # --json is UTC whatever the setting: a program reads it.
    assert as_env.show(task_id)["run_at"] == "2027-07-15T07:30:00.000000Z"
    bad = Taskq(berlin.spool, env={"TASKQ_TIMEFMT": "martian"}).run("ls", check=False)
    assert bad.returncode == 2 and bad.stderr.decode() == (
        "taskq: TASKQ_TIMEFMT='martian': use utc or local\n"
    )


# -- one local zone for submissions and schedules (issue 24, defect 3) ---------

POSIX_BERLIN = "CET-1CEST,M3.5.0,M10.5.0/3"


def test_a_posix_tz_rule_is_read_by_submit_and_refused_for_a_schedule(tq: Taskq) -> None:
    posix = Taskq(tq.spool, env={"TZ": POSIX_BERLIN})
    got = _submitted(posix, "--at", "2027-07-15 09:30")
    assert got["run_at"] == _wall(date(2027, 7, 15), 9, 30)  # the rule's CEST, as Berlin's
    done = posix.run("schedule", "add", "nightly", "--cron", "0 9 * * *", "--", "true", check=False)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        f"taskq: the local zone (TZ={POSIX_BERLIN!r}) has no IANA name to keep: "
        "give --tz, e.g. --tz Europe/Berlin\n"
    )
    assert posix.run("schedule", "ls", "--json").stdout.strip() in (b"", b"[]")
    # With --tz it is kept; --every needs no zone and takes UTC.
    posix.run(
        "schedule", "add", "nightly", "--cron", "0 9 * * *", "--tz", "Europe/Berlin", "--", "true"
    )
    posix.run("schedule", "add", "hourly", "--every", "1h", "--", "true")
    zones = {s["name"]: s["tz"] for s in map(json.loads, _lines(posix, "schedule", "ls", "--json"))}
    assert zones == {"nightly": "Europe/Berlin", "hourly": "UTC"}


def test_a_schedule_without_tz_keeps_the_local_zone_s_name(tq: Taskq) -> None:
    named = Taskq(tq.spool, env={"TZ": ":Europe/Berlin"})
    named.run("schedule", "add", "nightly", "--cron", "30 2 * * *", "--", "true")
    [doc] = map(json.loads, _lines(named, "schedule", "ls", "--json"))
    assert doc["tz"] == "Europe/Berlin"


def _lines(tq: Taskq, *args: str) -> list[str]:
    out = tq.run(*args).stdout.decode().strip()
    if out.startswith("["):
        return [json.dumps(d) for d in json.loads(out)]
    return [line for line in out.splitlines() if line]
