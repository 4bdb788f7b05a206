"""Regular expressions compiled on first use.

Every `taskq` command is a new process, and compiling the patterns of
modules it imports but never matches against was a noticeable part of a
submit's start-up. A `Lazy` pattern stands in for `re.compile` at module
level and compiles itself the first time it matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator


class Lazy:
    """A pattern compiled at its first match, with the match methods taskq uses.

    The pattern may be given as a function that makes its text, for one
    built from another module's words (those of claim names: spool/task.py),
    so that the words are not looked up before the first match either.
    """

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str | Callable[[], str], flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            text = self.pattern if isinstance(self.pattern, str) else self.pattern()
            self._compiled = re.compile(text, self.flags)
        return self._compiled

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return (self._compiled or self.compiled()).fullmatch(text)  # one call once compiled

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return (self._compiled or self.compiled()).finditer(text)
