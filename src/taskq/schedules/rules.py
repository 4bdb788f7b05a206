"""A schedule's slots when it has several expressions or exclusions: their union, less the excluded.

Pure, over slots.py's `Spec` (one expression or interval each): `Rules`
answers the questions a `Spec` answers (`after`, `upcoming`, `between`)
for the union of its specs, minus every slot that an `--except-cron`
expression also names and every slot whose local date (in the schedule's
zone) is an `--except` date. Slots that two expressions share are one slot,
so they run once. The walk from one slot to the next and its count are
slots.py's (`walk`, `count_upto`), for a spec and a union alike. A
schedule of one expression and no exclusions asks its `Spec` directly, so
its answers are exactly slots.py's.
"""

from __future__ import annotations

import itertools
import zoneinfo
from dataclasses import dataclass
from datetime import date

from taskq.errors import BadInput
from taskq.schedules.slots import WALK_LIMIT, Spec, count_upto, walk
from taskq.times.timespec import us_to_datetime

MARGIN = 64  # extra slots asked of each spec in `between`, for those exclusions remove


def check_date(text: str) -> str:
    """An --except date, YYYY-MM-DD; BadInput otherwise."""
    try:
        return date.fromisoformat(text.strip()).isoformat()
    except ValueError:
        raise BadInput(f"bad --except {text!r}: expected a date, YYYY-MM-DD") from None


@dataclass(frozen=True)
class Rules:
    """The union of specs, less the slots of `excluded` and those on `dates`."""

    specs: tuple[Spec, ...]
    excluded: tuple[Spec, ...] = ()
    dates: frozenset[str] = frozenset()

    @property
    def plain(self) -> bool:
        return len(self.specs) == 1 and not self.excluded and not self.dates

    def after(self, t: int) -> int | None:
        """The first slot strictly after t, or None when every spec has ended."""
        if self.plain:
            return self.specs[0].after(t)
        for _ in range(WALK_LIMIT):
            found = [s for s in (spec.after(t) for spec in self.specs) if s is not None]
            if not found:
                return None
            t = min(found)
            if not self.dropped(t):
                return t
        return None

    def upcoming(self, t: int, n: int) -> list[int]:
        """The next n slots after t (fewer if the schedule ends)."""
        return list(itertools.islice(walk(self.after, t), n))

    def between(self, lo: int, hi: int, keep: int) -> tuple[list[int], int]:
        """The last `keep` slots in (lo, hi], oldest first, and how many there are.

        The count is exact up to WALK_LIMIT slots walked; past that it is
        at least the number kept.
        """
        if self.plain:
            return self.specs[0].between(lo, hi, keep)
        merged: set[int] = set()
        for spec in self.specs:
            merged.update(spec.between(lo, hi, keep + MARGIN)[0])
        latest = sorted(s for s in merged if not self.dropped(s))[-keep:] if keep else []
        return latest, max(count_upto(walk(self.after, lo), hi), len(latest))

    def dropped(self, slot: int) -> bool:
        """Whether an exclusion removes this slot."""
        if any(spec.after(slot - 1) == slot for spec in self.excluded):
            return True
        if self.dates:
            tz = zoneinfo.ZoneInfo(self.specs[0].tz)
            return us_to_datetime(slot).astimezone(tz).date().isoformat() in self.dates
        return False
