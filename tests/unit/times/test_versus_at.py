"""taskq's WHEN against Debian's at(1) itself, form by form, zone by zone, on DST days.

Each row (a timespec, a zone, a pinned now) is given to the real at(1)
(/usr/bin/at, copied without its set-id bits so that libfaketime pins its
clock, its spool a tmpfs in a mount namespace of its own) and to
`when.parse_when`. at(1) works to the minute, so the answers agree when
taskq's instant falls in the minute at(1) chose. Every row where they do
not agree must be one of the cases taskq(1) DIFFERENCES FROM AT(1) lists,
each recognised here by its own test on both answers; `RULES` names them.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest

from taskq.errors import BadInput
from taskq.times.when import parse_when

LIBFAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
AT = shutil.which("at", path="/usr/bin")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        AT is None or LIBFAKETIME is None or os.geteuid() != 0 or not shutil.which("unshare"),
        reason="needs root, unshare, Debian's at and libfaketime (packages at and faketime)",
    ),
]
SECOND = 1_000_000
MINUTE = 60 * SECOND

# at(1)'s grammar (its timespec file and man page), form by form.
AT_FORMS = [
    *["9:30", "21:30", "09:41", "09:42", "0930", "2359", "9.45", "9h45", "12:00"],
    *["4pm", "4 pm", "9:30 am", "9:30pm", "12am", "12pm", "12:30am", "noon", "midnight"],
    *["teatime", "02:30", "01:30", "02:15", "03:00", "24:00", "12:60", "25:00"],
    *["today", "tomorrow", "tue", "sunday", "next friday", "next sun", "next minute"],
    *["next hour", "next day", "next week", "next month", "next year"],
    *["Dec 24", "24 Dec", "Dec 24 2027", "Dec 24, 2027", "Nov 30", "Jan 1", "Feb 29"],
    *["Feb 30", "Mar 29", "Oct 25", "2026-12-24", "26-12-24", "24.12.2026", "24.12.26"],
    *["12/24/2026", "12/24/26", "122426", "12242026", "10am Jul 31", "noon tomorrow"],
    *["9:00 fri", "02:30 tomorrow", "01:30 tomorrow", "noon Dec 24", "4pm 24.12.2026"],
    *["09:00 UTC", "18:00 UTC tomorrow", "now", "now + 2 hours", "now+90minutes"],
    *["now + 1 minute", "now + 1 hour", "now + 24 hours", "now - 0 minutes"],
    *["now - 5 minutes", "now + 1 day", "now + 3 days", "now + 2 weeks", "now + 1 month"],
    *["now + 1 year", "9:00 + 1 day", "midnight + 1 day", "9:00 + 1 hour", "noon + 1 day"],
    *["9:00 + 30 minutes", "teatime + 1 week", "4pm + 3 days", "noon tomorrow - 1 hour"],
    *["02:30 + 1 day", "00:30 - 1 hour", "today - 1 day", "tomorrow - 2 days"],
    *["Jan 31 + 1 month", "midnight tomorrow + 90 minutes", "next week + 1 hour"],
    *["24:60", "23:60", "2460", "12:61", "Apr 31", "Jan 32", "2027-02-29", "29.02.2027"],
    *["02/30/2027", "31.04.2027"],
]
# taskq's additions (DIFFERENCES FROM AT(1), "Forms at(1) refuses"): seconds,
# a date before the time, an IANA zone name, mins, ISO-8601, @EPOCH.
TASKQ_FORMS = [
    *["09:41:30", "Dec 24 9:00", "tomorrow 9:00", "2026-12-24 18:30", "now + 5 mins"],
    *["18:00 Asia/Tokyo", "2027-07-15T09:30", "2027-01-01T09:00:00Z", "@1796115600"],
]
NOT_TIMES = ["tomorrow tomorrow", "9:00 +", "noon - 1 fortnight", "half past nine"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
# A plain day, a year's end and a noon on the minute, everywhere; then the
# days each zone's clocks change (the day before, and just before the change).
EVERYWHERE = [(2026, 12, 1, 9, 41, 23), (2027, 12, 31, 23, 59, 30), (2027, 2, 28, 12, 0, 0)]
CHANGES = {
    "Europe/Berlin": [(2026, 3, 28, 12), (2026, 3, 29, 1), (2026, 10, 24, 12), (2026, 10, 25, 1)],
    "America/New_York": [(2026, 3, 7, 12), (2026, 3, 8, 1), (2026, 10, 31, 12), (2026, 11, 1, 0)],
    "Australia/Lord_Howe": [(2026, 4, 4, 12), (2026, 4, 5, 1), (2026, 10, 3, 12), (2026, 10, 4, 1)],
}


class Row(NamedTuple):
    form: str
    zone: str
    now: int  # epoch seconds


def rows() -> list[Row]:
    out = []
    for zone in ZONES:
        nows = [*EVERYWHERE, *((*c, 30, 0) for c in CHANGES.get(zone, []))]
        for parts in nows:
            now = int(datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp())
            out += [Row(form, zone, now) for form in (*AT_FORMS, *TASKQ_FORMS, *NOT_TIMES)]
    return out


class Answer(NamedTuple):
    instant: int | None  # µs; None when refused
    message: str


def at_answers(rows: list[Row], tmp: Path) -> list[Answer]:
    """What the real at(1) says to each row: the minute of its job, or its refusal."""
    at = tmp / "at"
    shutil.copy(str(AT), at)  # set-id bits gone, so that the dynamic loader honours LD_PRELOAD
    script = [
        "set -e",
        "mount -t tmpfs -o mode=0755 tmpfs /var/spool/cron",
        "mkdir -m 1770 /var/spool/cron/atjobs /var/spool/cron/atspool",
        "chown daemon:daemon /var/spool/cron/atjobs /var/spool/cron/atspool",
        "install -o daemon -g daemon -m 600 /dev/null /var/spool/cron/atjobs/.SEQ",
        "set +e",
    ]
    for i, row in enumerate(rows):
        words = " ".join(shlex.quote(w) for w in row.form.split())
        script.append(f"echo '@@ {i}' >&2")
        script.append(
            f"echo true | TZ={row.zone} LD_PRELOAD={LIBFAKETIME} FAKETIME_FMT=%s"
            f" FAKETIME={row.now} {at} {words}"
        )
    script.append("echo '@@ jobs' >&2; ls /var/spool/cron/atjobs >&2")
    (tmp / "at.sh").write_text("\n".join(script) + "\n")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", str(tmp / "at.sh")]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stderr
    answers, jobs = err.split("@@ jobs\n")
    # a job file is named a, its number in 5 hex digits, its minute since the epoch in 8
    minute = {int(n[1:6], 16): int(n[6:], 16) for n in jobs.split() if len(n) == 14}
    out = []
    for chunk in answers.split("@@ ")[1:]:
        lines = chunk.splitlines()[1:]
        job = next((re.match(r"job (\d+) at ", s) for s in lines if s.startswith("job ")), None)
        said = [s for s in lines if not s.startswith(("warning: commands", "Can't open /run"))]
        instant = minute[int(job.group(1))] * MINUTE if job else None
        out.append(Answer(instant, "; ".join(said)))
    assert len(out) == len(rows)
    return out


def taskq_answer(row: Row) -> Answer:
    try:
        return Answer(parse_when(row.form, row.now * SECOND, ZoneInfo(row.zone)), "")
    except BadInput as e:
        return Answer(None, str(e))


def _offset_changes(zone: str, start: int, end: int) -> Iterator[int]:
    """The instants (µs) in [start, end] where zone's UTC offset changes, to the minute."""
    tz = ZoneInfo(zone)
    t = start - start % MINUTE
    while t < end:
        a = datetime.fromtimestamp(t / SECOND, tz).utcoffset()
        b = datetime.fromtimestamp((t + 30 * MINUTE) / SECOND, tz).utcoffset()
        if a != b:
            yield t
        t += 30 * MINUTE


def _wall(us: int, zone: str) -> datetime:
    return datetime.fromtimestamp(us / SECOND, ZoneInfo(zone)).replace(tzinfo=None)


def explain(row: Row, at: Answer, tq: Answer) -> str | None:
    """Which entry of DIFFERENCES FROM AT(1) explains the two answers; None for none."""
    now = row.now * SECOND
    if at.instant is None and tq.instant is None:
        return "both refuse"
    if at.instant is not None and tq.instant is not None:
        if tq.instant - tq.instant % MINUTE == at.instant:
            return "same"
        lo, hi = sorted((at.instant, tq.instant))
        gap = hi - lo
        if gap in (30 * MINUTE, 60 * MINUTE) and any(_offset_changes(row.zone, now, hi)):
            return "summer time between now and the answer"
        if "UTC" in row.form.split() and gap == 24 * 60 * MINUTE:
            return "a zone after the time decides the day by its own clock"
        if tq.instant < now and _wall(at.instant, row.zone) == _wall(tq.instant, row.zone).replace(
            year=_wall(tq.instant, row.zone).year + 1, second=0, microsecond=0
        ):
            return "a decrement of a day without a year"
        if "month" in row.form and _wall(at.instant, row.zone) == _wall(
            tq.instant, row.zone
        ).replace(second=0, microsecond=0) + timedelta(days=1):
            return "a month past a month's end, moved to next year"
        return None
    if tq.instant is not None:  # at(1) refused
        if row.form in TASKQ_FORMS and "Garbled time" in at.message:
            return "a form at(1) refuses"
        if "in the past" in at.message and tq.instant <= now:
            return "a time that has passed"
        if "in the past" in at.message and " - " in row.form:
            return "a decrement that crosses midnight"
        return None
    if "out of range" in tq.message or "no day" in tq.message or "no date" in tq.message:
        return "fields out of range" if _hint_is_true(row, at, tq.message) else None
    if "does not exist in" in tq.message or "happens twice in" in tq.message:
        return "a time that summer time skips or repeats"
    return None


def _hint_is_true(row: Row, at: Answer, message: str) -> bool:
    """Whether taskq's refusal says what at(1) does: runs it then, or nothing when it refuses."""
    hint = re.search(r"at\(1\) would (?:run|carry it into) (.*?), taskq does not", message)
    if at.instant is None or hint is None:
        return at.instant is None and hint is None
    wall = _wall(at.instant, row.zone)
    said = hint.group(1).removesuffix(" the next day")
    return said in (f"{wall:%H:%M}", f"{wall.day} {wall:%b}", f"{wall:%b}")


def test_every_form_in_every_zone_gives_at_s_instant_or_a_documented_difference(
    tmp_path: Path,
) -> None:
    corpus = rows()
    ats = at_answers(corpus, tmp_path)
    seen: Counter[str] = Counter()
    agreed = set()
    unexplained = []
    for row, at in zip(corpus, ats, strict=True):
        tq = taskq_answer(row)
        why = explain(row, at, tq)
        seen[why or "unexplained"] += 1
        if why == "same":
            agreed.add(row.form)
        if why is None:
            shown = [
                _wall(a.instant, row.zone).isoformat() if a.instant else a.message for a in (at, tq)
            ]
            unexplained.append((row.form, row.zone, _wall(row.now * SECOND, row.zone), *shown))
    assert unexplained == []
    # every form of at(1)'s grammar agrees somewhere, and the corpus reaches every rule
    # but those taskq(1) lists as never the same: out of range, or in the past for at(1)
    never = {"24:00", "12:60", "25:00", "Feb 30", "now - 5 minutes", "00:30 - 1 hour"}
    never |= {"24:60", "23:60", "2460", "12:61", "Apr 31", "Jan 32", "2027-02-29", "29.02.2027"}
    never |= {"02/30/2027", "31.04.2027"}
    assert set(AT_FORMS) - agreed == never | {"today - 1 day", "tomorrow - 2 days"}
    assert set(seen) == {
        "same",
        "both refuse",
        "summer time between now and the answer",
        "a zone after the time decides the day by its own clock",
        "a decrement of a day without a year",
        "a month past a month's end, moved to next year",
        "a form at(1) refuses",
        "a time that has passed",
        "a decrement that crosses midnight",
        "fields out of range",
        "a time that summer time skips or repeats",
    }, seen


def test_at_refuses_what_is_not_a_time_and_so_does_taskq(tmp_path: Path) -> None:
    corpus = [Row(form, "UTC", 1796115600) for form in NOT_TIMES]
    for row, at in zip(corpus, at_answers(corpus, tmp_path), strict=True):
        assert at.instant is None and "Garbled time" in at.message, row
        assert taskq_answer(row).instant is None, row
