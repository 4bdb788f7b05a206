"""A schedule's slots against systemd's calendar events, expression by expression, on DST days.

`systemd-analyze calendar --base-time` is an independent implementation of
"the next times this wall-clock pattern matches, in this zone". For each
cron expression and its OnCalendar equivalent, in five zones, from a plain
day and from the day before each change of the clocks, the next slots of
`Spec.upcoming` and systemd's next elapses must be the same, except where
the two follow different rules, each of which is recognised here: a
fixed time that the clocks skip runs at the gap's end in taskq, as cron(8)
says, and is skipped by systemd; a job with a wildcard minute runs in both
passes of a repeated hour in taskq, as cron(8) runs it on the new time,
and once in systemd.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from taskq.schedules.slots import Spec, check_cron

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _has_base_time() -> bool:
    if SYSTEMD_ANALYZE is None:
        return False
    helped = subprocess.run([SYSTEMD_ANALYZE, "--help"], capture_output=True, text=True)
    return "--base-time" in helped.stdout


pytestmark = [
    pytest.mark.slow,  # 154 runs of systemd-analyze
    pytest.mark.skipif(
        not _has_base_time(), reason="needs systemd-analyze with --base-time (systemd 250 or later)"
    ),
]
SECOND = 1_000_000
N = 8
PAIRS = [
    ("30 * * * *", "*-*-* *:30:00"),
    ("*/15 * * * *", "*-*-* *:00/15:00"),
    ("0 * * * *", "*-*-* *:00:00"),
    ("30 2 * * *", "*-*-* 02:30:00"),
    ("30 1 * * *", "*-*-* 01:30:00"),
    ("0 9 * * 1-5", "Mon..Fri *-*-* 09:00:00"),
    ("0 0 1 * *", "*-*-01 00:00:00"),
    ("15 10 * 1,7 *", "*-01,07-* 10:15:00"),
    ("*/15 1-3 * * *", "*-*-* 01..03:00/15:00"),
    ("0 12 29 2 *", "*-02-29 12:00:00"),
    ("45 23 31 * *", "*-*-31 23:45:00"),
    ("0 */6 * * *", "*-*-* 00/6:00:00"),
    ("0 2 * * 0", "Sun *-*-* 02:00:00"),
    ("5 4 * * 6", "Sat *-*-* 04:05:00"),
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
CHANGES = {
    "Europe/Berlin": [(2026, 3, 28, 12), (2026, 10, 24, 12)],
    "America/New_York": [(2026, 3, 7, 12), (2026, 10, 31, 12)],
    "Australia/Lord_Howe": [(2026, 4, 4, 12), (2026, 10, 3, 12)],
}


def systemd_next(calendar: str, zone: str, base: int) -> list[int]:
    """systemd's next N elapses (epoch seconds) after base."""
    assert SYSTEMD_ANALYZE is not None
    args = ["calendar", f"--base-time=@{base}", f"--iterations={N}", f"{calendar} {zone}"]
    out = subprocess.run(
        [SYSTEMD_ANALYZE, *args],
        capture_output=True,
        text=True,
        check=True,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    ).stdout
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) UTC", out)
    return [int(datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()) for s in stamps]


def _offset_changes_at(t: int, zone: ZoneInfo) -> bool:
    """Whether zone's clocks change at instant t (the end of a gap)."""
    before = datetime.fromtimestamp(t - 1, zone).utcoffset()
    return before != datetime.fromtimestamp(t, zone).utcoffset()


def _second_pass(t: int, zone: ZoneInfo, both: set[int]) -> bool:
    """Whether t is the second pass of a wall time that both lists ran the first time."""
    wall = datetime.fromtimestamp(t, zone).replace(tzinfo=None)
    first = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    return first != t and first in both


def why_apart(cron: str, zone: str, tq: list[int], sd: list[int]) -> list[str]:
    """Each slot the two do not share up to the earlier last, with the rule behind it."""
    tz = ZoneInfo(zone)
    horizon = min(tq[-1], sd[-1])
    both = set(tq) & set(sd)
    reasons = []
    for t in sorted(set(tq) ^ set(sd)):
        if t > horizon:
            continue
        if t in tq and _offset_changes_at(t, tz) and not cron.startswith("*"):
            reasons.append("fixed time in a gap: taskq at the gap's end, systemd skips it")
        elif t in tq and cron.startswith("*") and _second_pass(t, tz, both):
            reasons.append("wildcard minute: taskq runs both passes, systemd one")
        else:
            shown = datetime.fromtimestamp(t, tz).isoformat()
            reasons.append(f"unexplained: {shown} only in {'taskq' if t in tq else 'systemd'}")
    return reasons


def test_slots_are_systemd_s_elapses_but_where_cron_8_s_dst_rule_differs() -> None:
    rows = same = 0
    reasons: list[str] = []
    for zone in ZONES:
        for start in [(2026, 12, 1, 9), *CHANGES.get(zone, [])]:
            base = int(datetime(*start, tzinfo=ZoneInfo(zone)).timestamp())
            for cron, calendar in PAIRS:
                spec = Spec(cron=check_cron(cron), every=None, tz=zone, anchor=0)
                tq = [u // SECOND for u in spec.upcoming(base * SECOND, N)]
                sd = systemd_next(calendar, zone, base)
                assert len(tq) == len(sd) == N, (cron, zone, start)
                rows += 1
                same += tq == sd
                reasons += why_apart(cron, zone, tq, sd)
    assert [r for r in reasons if r.startswith("unexplained")] == []
    assert set(reasons) == {
        "fixed time in a gap: taskq at the gap's end, systemd skips it",
        "wildcard minute: taskq runs both passes, systemd one",
    }
    assert (rows, same) == (14 * 11, 147)  # 7 rows apart, each for a reason above
