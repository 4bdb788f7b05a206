"""A command as taskq shows it: one line a shell would read, quoted as all untrusted text is.

`ls`, `show` and `schedule show` print a task's or a schedule's command
so. A command is a spool member's or a careless operator's text: its
arguments may hold newlines (a forged `state:` line under `show`),
terminal escapes or bytes that are not UTF-8. shlex.join gives the line a
shell would read; text.quote then makes it one line of printable text
(a newline is `\\n`, ESC is `\\x1b`, a backslash is doubled).
"""

from __future__ import annotations

import functools
import shlex

from taskq.text.quote import quote


@functools.lru_cache(maxsize=1024)
def command_line(argv: tuple[str, ...]) -> str:
    """argv as sh(1) reads it, through quote (cached: many tasks share their command)."""
    return quote(shlex.join(argv))
