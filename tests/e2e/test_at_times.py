"""Times the at(1) way through the real CLI and real daemons: local, at-style, DST, --local."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from pathlib import Path
from typing import NamedTuple
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


# -- the corpus: every documented form, through `taskq at` and `taskq submit --at` --
#
# Each row is run by both commands with the CLI's clock frozen at the row's
# now by libfaketime (the CLI has no "now" option), in the row's zone, and
# the stored run_at is compared with the instant computed here from zoneinfo.

LIBFAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
needs_faketime = pytest.mark.skipif(
    LIBFAKETIME is None, reason="libfaketime (Debian package faketime) is missing"
)
CTIME = "%a %b %e %H:%M:%S %Y"
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
NEW_YORK = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")
UTC_ZONE = ZoneInfo("UTC")
# Tuesday 2026-12-01 09:41:23 in Berlin: "at 09:41" in the issue's words.
NOW = datetime(2026, 12, 1, 9, 41, 23, tzinfo=BERLIN)


def _b(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, s, tzinfo=BERLIN)


def _at_now(d: date) -> datetime:
    """Day d at NOW's time of day, in Berlin."""
    return datetime.combine(d, NOW.time().replace(tzinfo=None), tzinfo=BERLIN)


class Row(NamedTuple):
    form: str
    expected: datetime
    now: datetime = NOW


CORPUS = [
    # TIME alone: the next such time; the current minute has passed (items 2, 6)
    Row("9:30", _b(2026, 12, 2, 9, 30)),
    Row("21:30", _b(2026, 12, 1, 21, 30)),
    Row("09:41", _b(2026, 12, 2, 9, 41)),
    Row("09:42", _b(2026, 12, 1, 9, 42)),
    Row("0930", _b(2026, 12, 2, 9, 30)),
    Row("9.45", _b(2026, 12, 1, 9, 45)),
    Row("9h45", _b(2026, 12, 1, 9, 45)),
    Row("09:41:30", _b(2026, 12, 1, 9, 41, 30)),
    Row("4pm", _b(2026, 12, 1, 16)),
    Row("4 pm", _b(2026, 12, 1, 16)),
    Row("9:30 am", _b(2026, 12, 2, 9, 30)),
    Row("12am", _b(2026, 12, 2, 0)),
    Row("12pm", _b(2026, 12, 1, 12)),
    Row("noon", _b(2026, 12, 1, 12)),
    Row("noon", _b(2026, 12, 2, 12), now=_b(2026, 12, 1, 12)),  # at 12:00:00 itself
    Row("midnight", _b(2026, 12, 2, 0)),
    Row("teatime", _b(2026, 12, 1, 16)),
    # DAY alone keeps the time of day (item 3); weekdays, next, today, tomorrow
    Row("today", NOW),
    Row("tomorrow", _at_now(date(2026, 12, 2))),
    Row("tue", _at_now(date(2026, 12, 8))),
    Row("next friday", _at_now(date(2026, 12, 4))),
    Row("next minute", NOW + timedelta(minutes=1)),
    Row("next hour", NOW + timedelta(hours=1)),
    Row("next day", _at_now(date(2026, 12, 2))),
    Row("next week", _at_now(date(2026, 12, 8))),
    Row("next month", _at_now(date(2027, 1, 1))),
    Row("next year", _at_now(date(2027, 12, 1))),
    Row("Dec 24", _at_now(date(2026, 12, 24))),
    Row("24 Dec", _at_now(date(2026, 12, 24))),
    Row("Dec 24 2027", _at_now(date(2027, 12, 24))),
    Row("Dec 24, 2027", _at_now(date(2027, 12, 24))),
    Row("Nov 30", _at_now(date(2027, 11, 30))),  # before today: next year's
    Row("2026-12-24", _at_now(date(2026, 12, 24))),
    Row("26-12-24", _at_now(date(2026, 12, 24))),
    Row("24.12.2026", _at_now(date(2026, 12, 24))),
    Row("24.12.26", _at_now(date(2026, 12, 24))),
    Row("12/24/2026", _at_now(date(2026, 12, 24))),
    Row("12/24/26", _at_now(date(2026, 12, 24))),
    Row("122426", _at_now(date(2026, 12, 24))),
    Row("12242026", _at_now(date(2026, 12, 24))),
    # TIME and DAY together, either order
    Row("10am Jul 31", _b(2027, 7, 31, 10)),
    Row("noon tomorrow", _b(2026, 12, 2, 12)),
    Row("9:00 fri", _b(2026, 12, 4, 9)),
    Row("tomorrow 9:00", _b(2026, 12, 2, 9)),
    Row("2026-12-24 18:30", _b(2026, 12, 24, 18, 30)),
    Row("noon 2026-12-24", _b(2026, 12, 24, 12)),
    # a zone after the time, which also decides today or tomorrow
    Row("09:00 UTC", datetime(2026, 12, 1, 9, tzinfo=UTC)),  # 08:41Z: still to come
    Row("09:00 UTC", datetime(2026, 12, 2, 9, tzinfo=UTC), now=_b(2026, 12, 1, 10, 30)),
    Row("18:00 Asia/Tokyo", datetime(2026, 12, 1, 18, tzinfo=TOKYO)),  # 17:41 there
    # ISO-8601, @EPOCH, now
    Row("2026-12-01T09:00:00Z", datetime(2026, 12, 1, 9, tzinfo=UTC)),
    Row("2026-12-01T10:00:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
    Row("2027-07-15T09:30", _b(2027, 7, 15, 9, 30)),
    Row("2027-07-15T09:30:00.250Z", datetime(2027, 7, 15, 9, 30, 0, 250000, tzinfo=UTC)),
    Row("@1796115600", datetime.fromtimestamp(1796115600, UTC)),
    Row("@1796115600.25", datetime.fromtimestamp(1796115600.25, UTC)),
    Row("now", NOW),
    # increments and decrements (items 1, 4)
    Row("now + 2 hours", NOW + timedelta(hours=2)),
    Row("now+90minutes", NOW + timedelta(minutes=90)),
    Row("now + 5 mins", NOW + timedelta(minutes=5)),
    Row("now - 0 minutes", NOW),
    Row("now + 3 days", _at_now(date(2026, 12, 4))),
    Row("now + 2 weeks", _at_now(date(2026, 12, 15))),
    Row("9:00 + 1 day", _b(2026, 12, 2, 9)),
    Row("midnight + 1 day", _b(2026, 12, 2, 0)),
    Row("9:00 + 1 hour", _b(2026, 12, 1, 10)),
    Row("9:00 + 30 minutes", _b(2026, 12, 2, 9, 30)),
    Row("teatime + 1 week", _b(2026, 12, 8, 16)),
    Row("4pm + 3 days", _b(2026, 12, 4, 16)),
    Row("noon tomorrow - 1 hour", _b(2026, 12, 2, 11)),
    Row("Jan 31 + 1 month", _at_now(date(2027, 3, 3))),
    Row("now + 1 year", _at_now(date(2027, 12, 1))),
    # summer time: taskq's answers where at(1)'s differ (DIFFERENCES FROM AT(1))
    Row("now + 2 hours", _b(2026, 3, 29, 4, 30), now=_b(2026, 3, 29, 1, 30)),
    Row("now + 1 day", _b(2026, 10, 25, 12), now=_b(2026, 10, 24, 12)),
    Row("now + 24 hours", _b(2026, 10, 25, 11), now=_b(2026, 10, 24, 12)),
    Row("02:30 tomorrow", _b(2026, 3, 30, 2, 30), now=_b(2026, 3, 29, 1)),
    Row(
        "now + 1 day",
        datetime(2026, 4, 5, 12, tzinfo=LORD_HOWE),
        now=datetime(2026, 4, 4, 12, tzinfo=LORD_HOWE),
    ),
    Row(
        "noon tomorrow",
        datetime(2026, 10, 4, 12, tzinfo=LORD_HOWE),
        now=datetime(2026, 10, 3, 12, tzinfo=LORD_HOWE),
    ),
    Row(
        "now + 2 hours",
        datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=1),
        now=datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK),
    ),
]


def _pinned(tq: Taskq, now: datetime) -> Taskq:
    """The CLI as run in now's zone, its clock frozen at now (libfaketime)."""
    assert LIBFAKETIME is not None
    env = {
        "TZ": str(now.tzinfo),
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME_FMT": "%s",
        "FAKETIME": str(int(now.timestamp())),
    }
    return Taskq(tq.spool, env=env)


def _at(tq: Taskq, row: Row) -> subprocess.CompletedProcess[bytes]:
    return _pinned(tq, row.now).run("at", *row.form.split(), input=b"true\n", check=False)


def _submit(tq: Taskq, row: Row) -> str:
    """The id `taskq submit --at FORM` prints."""
    proc = _pinned(tq, row.now).run("submit", "--json", "--at", row.form, "--", "true")
    return str(json.loads(proc.stdout)["id"])


def _batched(tq: Taskq, rows: list[Row]) -> list[str]:
    """The ids of one `submit --batch` per now, each row's form as its line's run_at."""
    by_now: dict[tuple[float, str], list[int]] = {}
    for i, row in enumerate(rows):
        by_now.setdefault((row.now.timestamp(), str(row.now.tzinfo)), []).append(i)
    ids: dict[int, str] = {}
    for rows_of_now in by_now.values():
        lines = [{"command": ["true"], "run_at": rows[i].form} for i in rows_of_now]
        batch = "".join(json.dumps(line) + "\n" for line in lines).encode()
        out = _pinned(tq, rows[rows_of_now[0]].now).run("submit", "--batch", "-", input=batch)
        ids.update(zip(rows_of_now, out.stdout.decode().split(), strict=True))
    return [ids[i] for i in range(len(rows))]


# The issue's own examples, at 09:41: items 1 to 4, fast enough for every run.
ISSUE_ROWS = [
    Row("9:00 + 1 day", _b(2026, 12, 2, 9)),
    Row("9:00 + 1 hour", _b(2026, 12, 1, 10)),
    Row("09:41", _b(2026, 12, 2, 9, 41)),
    Row("2026-12-24", _at_now(date(2026, 12, 24))),
    Row("noon tomorrow - 1 hour", _b(2026, 12, 2, 11)),
]


@needs_faketime
@pytest.mark.slow
def test_the_issue_s_forms_give_at_s_instants_through_at_and_submit(tq: Taskq) -> None:
    _check_rows(tq, ISSUE_ROWS)


@needs_faketime
@pytest.mark.slow
def test_every_documented_form_gives_the_zoneinfo_instant_through_at_and_submit(
    tq: Taskq,
) -> None:
    _check_rows(tq, CORPUS, batched=True)  # the issue's rows above go through --at


def _check_rows(tq: Taskq, rows: list[Row], batched: bool = False) -> None:
    """Each row through `taskq at` and `taskq submit --at` (or, batched, as a batch
    line's run_at, one `submit --batch` for the rows of each now)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        ats = list(pool.map(lambda row: _at(tq, row), rows))
        submitted = _batched(tq, rows) if batched else list(pool.map(partial(_submit, tq), rows))
    run_at = {doc["id"]: doc["run_at"] for doc in map(json.loads, _ls_json(tq))}
    wrong = []
    for row, at, submit_id in zip(rows, ats, submitted, strict=True):
        assert at.returncode == 0, (row, at.stderr)
        at_id = at.stdout.decode().strip()
        expected = _iso_z(row.expected)
        shown = row.expected.astimezone(row.now.tzinfo).strftime(CTIME)
        got = (run_at[at_id], run_at[submit_id], at.stderr.decode())
        want = (
            expected,
            expected,
            f"warning: commands will be executed using /bin/sh\njob {at_id} at {shown}\n",
        )
        if got != want:
            wrong.append((row.form, str(row.now), got, want))
    assert wrong == []


@needs_faketime
@pytest.mark.slow
def test_at_minus_t_is_a_local_time(tq: Taskq) -> None:
    pinned = _pinned(tq, NOW)
    for text, expected in [
        ("12241830", _b(2026, 12, 24, 18, 30)),
        ("2712241830.15", _b(2027, 12, 24, 18, 30, 15)),
        ("202707150930", _b(2027, 7, 15, 9, 30)),
    ]:
        task_id = pinned.run("at", "-t", text, input=b"true\n").stdout.decode().strip()
        assert tq.show(task_id)["run_at"] == _iso_z(expected)
    bad = pinned.run("at", "-t", "03290230", "--", input=b"", check=False)
    assert bad.returncode == 2


@needs_faketime
@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            "24:00",
            "taskq: bad time '24:00': hour 24 is out of range (0-23); at(1) would run "
            "00:00 the next day, taskq does not carry it over\n",
        ),
        (
            "12:60",
            "taskq: bad time '12:60': minute 60 is out of range (0-59); at(1) would run "
            "13:00, taskq does not carry it over\n",
        ),
        (
            "Feb 30",
            "taskq: bad time 'Feb 30': Feb has no day 30; at(1) would carry it into Mar,"
            " taskq does not\n",
        ),
    ],
)
def test_out_of_range_fields_are_refused_by_both(tq: Taskq, form: str, message: str) -> None:
    pinned = _pinned(tq, NOW)
    at = pinned.run("at", *form.split(), input=b"true\n", check=False)
    submit = pinned.run("submit", "--at", form, "--", "true", check=False)
    for done in (at, submit):
        assert (done.returncode, done.stderr.decode(), done.stdout) == (2, message, b"")
    assert not list((tq.spool / "pending").glob("*/*"))


def _ls_json(tq: Taskq) -> list[str]:
    return tq.run("ls", "--json").stdout.decode().split("\n")[:-1]


def _iso_z(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


@pytest.mark.slow
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


@pytest.mark.parametrize("when", ["now + 2 hours", "@1800000000", "2027-01-01T09:00Z + 1 day"])
def test_a_time_that_needs_no_zone_does_not_load_the_zone_database(tq: Taskq, when: str) -> None:
    # A submission's start-up is its throughput: zoneinfo only for a local time.
    script = (
        "import sys\n"
        "from taskq.cli.main import main\n"
        f"sys.argv = ['taskq', 'submit', '--at', {when!r}, '--', 'true']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('zoneinfo' in sys.modules, 'taskq.times.zones' in sys.modules)\n"
    )
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, timeout=60, check=True
    )
    assert done.stdout.decode().splitlines()[-1] == "False False"
