"""The words of at(1)'s time grammar: text to a parsed spec, no calendar, no clock.

The grammar is Debian at 3.2's (its parsetime.l and parsetime.y, summed up
in /usr/share/doc/at/timespec), with taskq's additions: seconds
(HH:MM:SS), a date before the time ("tomorrow 9:00", "2026-12-24 18:30"),
an IANA zone name where at takes only UTC, and "mins". What the parsed
words mean, given a now and a zone, is `when`'s job; this module only says
which words were given. Out-of-range fields that at(1) carries over (24:00,
12:60, 31 February) are refused here, each with a message saying so.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from taskq.errors import BadInput
from taskq.text.lazyre import Lazy

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # date.weekday() order
_MONTH_WORDS = {m: i + 1 for i, m in enumerate(MONTHS)}
_MONTH_WORDS.update(
    {"january": 1, "february": 2, "march": 3, "april": 4, "june": 6, "july": 7}
    | {"august": 8, "september": 9, "october": 10, "november": 11, "december": 12}
)
_WEEKDAY_WORDS = {w: i for i, w in enumerate(WEEKDAYS)}
_WEEKDAY_WORDS.update(
    {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3}
    | {"friday": 4, "saturday": 5, "sunday": 6}
)
_UNIT_WORDS = {"min": "minute", "mins": "minute"} | {
    f"{u}{s}": u for u in ("minute", "hour", "day", "week", "month", "year") for s in ("", "s")
}
_NAMED = {"noon": (12, 0), "midnight": (0, 0), "teatime": (16, 0)}
_DAYS_IN = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # a month's most days

# One token each; whitespace between tokens is skipped, anything else is `bad`.
_TOKEN = Lazy(
    r"(?P<dotted>\d{1,2}\.\d{1,2}\.\d{2}(?:\d{2})?)(?![\d.])"
    r"|(?P<hyphen>\d{2}(?:\d{2})?-\d{1,2}-\d{1,2})(?![\d-])"
    r"|(?P<clock>[012]?\d[:'h,.]\d{2}(?::\d{2})?)(?![\d:])"
    r"|(?P<int>\d+)"
    r"|(?P<zone>[A-Za-z][\w+-]*(?:/[\w+-]+)+)"
    r"|(?P<word>[A-Za-z]+)"
    r"|(?P<punct>[-+,/])"
    r"|(?P<bad>\S)",
    re.ASCII,  # ASCII digits, as cron's: int() would read fullwidth and Arabic-Indic ones too
)


class Unparsable(BadInput):
    """What is wrong with a timespec's words; the caller names the text."""

    help = False  # whether the caller should add the forms that would do


class NotATime(Unparsable):
    """Words that are no timespec at all."""

    help = True


class Date(NamedTuple):
    """A day as written: a calendar date, or a number of days, or a weekday, from today."""

    year: int | None = None  # None with a month: the next such day (this year or the next)
    month: int | None = None
    day: int | None = None
    days: int = 0  # today 0, tomorrow 1
    weekday: int | None = None  # 0 Monday .. 6 Sunday: the next such day, 1 to 7 days on
    next_unit: str | None = None  # "next week": one unit on from now
    carries: bool = True  # at(1) carries a day past the month's end over (not in [CC]YY-MM-DD)


class Parsed(NamedTuple):
    """The parts of an at(1) timespec; None where the text gave none."""

    now: bool = False
    clock: tuple[int, int, int] | None = None  # hour, minute, second
    seconds: bool = False  # the clock gave seconds: it passes by the second, not the minute
    date: Date | None = None
    zone: str | None = None  # "UTC" or an IANA name written after the time
    amount: int = 0  # the signed increment
    unit: str | None = None  # minute, hour, day, week, month or year


class Token(NamedTuple):
    kind: str
    text: str


def tokens(text: str) -> list[Token]:
    """The tokens of text, at(1)'s lexer's: case does not matter, spaces are optional."""
    out: list[Token] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "bad"
        value = m.group(0)
        out.append(Token(kind, value if kind == "zone" else value.lower()))
    return out


def parse(text: str) -> Parsed:
    """The parsed timespec; Unparsable (without the text, which the caller names) if none."""
    return _Parser(tokens(text)).timespec()


def unit(word: str) -> str | None:
    """The unit an increment's word names (minutes -> minute), else None."""
    return _UNIT_WORDS.get(word.lower())


class _Parser:
    """A recursive-descent reader of at(1)'s grammar over a token list."""

    def __init__(self, toks: list[Token]) -> None:
        self.toks = toks
        self.pos = 0
        self.now = False
        self.clock: tuple[int, int, int] | None = None
        self.seconds = False
        self.date: Date | None = None
        self.zone: str | None = None
        self.amount = 0
        self.unit: str | None = None

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.toks[i] if i < len(self.toks) else None

    def text(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        return "" if tok is None else tok.text

    def kind(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        return "" if tok is None else tok.kind

    def timespec(self) -> Parsed:
        if self.text() == "now":
            self.pos += 1
            self.now = True
        elif self._time():
            self._date()
        elif self._date():
            self._time()
        else:
            raise NotATime("not a time")
        self._increment()
        if self.peek() is not None:
            raise NotATime(f"unexpected {self.text()!r}")
        return Parsed(
            self.now, self.clock, self.seconds, self.date, self.zone, self.amount, self.unit
        )

    def _increment(self) -> None:
        sign = self.text()
        if sign not in ("+", "-"):
            return
        if self.kind(1) != "int" or self.text(2) not in _UNIT_WORDS:
            raise Unparsable(f"after {sign!r} give a number and a unit (minutes ... years)")
        if len(self.text(1)) > 9:
            raise Unparsable(f"increment {self.text(1)} is out of range")
        self.amount = int(self.text(1)) * (-1 if sign == "-" else 1)
        self.unit = _UNIT_WORDS[self.text(2)]
        self.pos += 3

    # -- the time of day ------------------------------------------------------

    def _time(self) -> bool:
        if self.clock is not None:
            return False
        word, kind = self.text(), self.kind()
        if word in _NAMED:
            self.pos += 1
            self._set_clock(*_NAMED[word], None)
        elif kind == "clock":
            self.pos += 1
            hour, minute, second = _clock_fields(word)
            self._set_clock(self._meridiem(hour), minute, second)
        elif kind == "int" and len(word) == 4:
            self.pos += 1  # hhmm, on the 24-hour clock
            self._set_clock(int(word[:2]), int(word[2:]), None)
        elif kind == "int" and len(word) <= 2 and self.text(1) in ("am", "pm"):
            self.pos += 1
            self._set_clock(self._meridiem(int(word)), 0, None)
        else:
            return False
        if self.kind() == "zone" or self.text() == "utc":
            self.zone = "UTC" if self.text() == "utc" else self.text()
            self.pos += 1
        return True

    def _meridiem(self, hour: int) -> int:
        word = self.text()
        if word not in ("am", "pm"):
            return hour
        self.pos += 1
        if hour > 12:
            raise Unparsable(f"hour {hour} is too large for {word}")
        if word == "am":
            return 0 if hour == 12 else hour
        return hour if hour == 12 else hour + 12

    def _set_clock(self, hour: int, minute: int, second: int | None) -> None:
        if hour > 23 or minute > 59:
            field = f"hour {hour} is out of range (0-23)" if hour > 23 else ""
            field = field or f"minute {minute} is out of range (0-59)"
            carried = _carried_clock(hour, minute) if second is None else None
            hint = f"; at(1) would run {carried}, taskq does not carry it over" if carried else ""
            raise Unparsable(field + hint)
        if second is not None and second > 59:
            raise Unparsable(f"second {second} is out of range (0-59)")
        self.clock = (hour, minute, second or 0)
        self.seconds = second is not None

    # -- the day --------------------------------------------------------------

    def _date(self) -> bool:
        if self.date is not None:
            return False
        self.date = self._relative_day() or self._written_day()
        return self.date is not None

    def _relative_day(self) -> Date | None:
        word = self.text()
        if word in ("today", "tomorrow"):
            self.pos += 1
            return Date(days=int(word == "tomorrow"))
        if word in _WEEKDAY_WORDS:
            self.pos += 1
            return Date(weekday=_WEEKDAY_WORDS[word])
        if word != "next":
            return None
        after = self.text(1)
        self.pos += 2
        if after in _WEEKDAY_WORDS:
            return Date(weekday=_WEEKDAY_WORDS[after])
        if after in _UNIT_WORDS:
            return Date(next_unit=_UNIT_WORDS[after])
        raise Unparsable("after 'next' give a weekday or a unit (minute ... year)")

    def _written_day(self) -> Date | None:
        word, kind = self.text(), self.kind()
        if kind == "hyphen":  # [CC]YY-MM-DD
            self.pos += 1
            y, m, d = word.split("-")
            return _checked(year_of(y), int(m), int(d), carries=False)
        if kind == "dotted":  # DD.MM.[CC]YY
            self.pos += 1
            d, m, y = word.split(".")
            return _checked(year_of(y), int(m), int(d), carries=False)
        if word in _MONTH_WORDS:  # month DD [[,] YYYY]
            self.pos += 1
            return self._day_then_year(_MONTH_WORDS[word])
        if kind != "int":
            return None
        if len(word) <= 2 and self.text(1) in _MONTH_WORDS:  # DD month [YYYY]
            month = _MONTH_WORDS[self.text(1)]
            self.pos += 2
            return _checked(self._year_number(), month, int(word))
        if len(word) <= 2 and self.text(1) == "/":
            return self._slashed()
        if 5 <= len(word) <= 8:  # MMDD[CC]YY
            self.pos += 1
            return _concatenated(word)
        return None

    def _day_then_year(self, month: int) -> Date:
        if self.kind() != "int" or len(self.text()) > 2:
            raise Unparsable("give the day after the month, e.g. Dec 24")
        day = int(self.text())
        self.pos += 1
        if self.text() == ",":
            self.pos += 1
            year = self._year_number()
            if year is None:
                raise Unparsable("give the year after the comma, e.g. Dec 24, 2027")
            return _checked(year, month, day)
        return _checked(self._year_number(), month, day)

    def _year_number(self) -> int | None:
        """A year of 2 or 4 digits here, unless they are the hour of '4 pm'."""
        if self.kind() != "int" or len(self.text()) not in (2, 4):
            return None
        if self.text(1) in ("am", "pm"):
            return None
        self.pos += 1
        return year_of(self.toks[self.pos - 1].text)

    def _slashed(self) -> Date:
        """MM/DD/[CC]YY."""
        month, day, year = self.text(), self.text(2), self.text(4)
        if not (
            self.text(3) == "/"
            and self.kind(2) == "int"
            and len(day) <= 2
            and self.kind(4) == "int"
            and len(year) in (2, 4)
        ):
            raise Unparsable("give a slashed date as MM/DD/YY or MM/DD/YYYY")
        self.pos += 5
        return _checked(year_of(year), int(month), int(day))


_CLOCK = Lazy(r"(\d{1,2})[:'h,.](\d{2})(?::(\d{2}))?", re.ASCII)


def _clock_fields(text: str) -> tuple[int, int, int | None]:
    """HH:MM[:SS], with any of at's separators (: ' h , .) after the hour."""
    m = _CLOCK.fullmatch(text)
    assert m is not None  # the token's own pattern
    return int(m.group(1)), int(m.group(2)), None if m.group(3) is None else int(m.group(3))


def year_of(text: str) -> int:
    """A year of two or four digits; two digits are 1970-2069, as at(1) reads them."""
    year = int(text)
    if len(text) <= 2:
        return year + (2000 if year < 70 else 1900)
    return year


def _concatenated(text: str) -> Date:
    """MMDD[CC]YY, at(1)'s concatenated date (a one-digit month with 5 or 7 digits)."""
    cut = 1 if len(text) in (5, 7) else 2
    month, day, year = text[:cut], text[cut : cut + 2], text[cut + 2 :]
    return _checked(year_of(year), int(month), int(day))


def _carried_clock(hour: int, minute: int) -> str | None:
    """What at(1) runs for an hour of 24 or a minute of 60; None where it refuses too."""
    if hour > 24 or minute > 60:
        return None
    days, rest = divmod(hour * 60 + minute, 24 * 60)
    return f"{rest // 60:02d}:{rest % 60:02d}" + (" the next day" if days else "")


def _checked(year: int | None, month: int, day: int, carries: bool = True) -> Date:
    """A written date whose month and day can exist; at(1) would carry 31 April over.

    at(1) carries a day of 1 to 31 past the month's end, but not in
    [CC]YY-MM-DD or DD.MM.[CC]YY (carries=False), which it refuses.
    """
    if not 1 <= month <= 12:
        raise Unparsable(f"month {month} is out of range (1-12)")
    if not 1 <= day <= _DAYS_IN[month - 1]:
        after = MONTHS[month % 12].title()
        hint = carries and 1 <= day <= 31
        raise Unparsable(
            f"{MONTHS[month - 1].title()} has no day {day}"
            + (f"; at(1) would carry it into {after}, taskq does not" if hint else "")
        )
    return Date(year=year, month=month, day=day, carries=carries)
