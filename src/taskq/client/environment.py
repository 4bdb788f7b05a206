"""What submit records of the person submitting, as at(1) does: environment and umask.

The environment is recorded less the variables that belong to the terminal
or login session of the moment rather than to a later process (LEFT_OUT,
listed in taskq(1)), taskq's own TASKQ_* (the daemon sets those), names a
task could not be given ([A-Za-z_][A-Za-z0-9_]* only: bash's exported
functions are left out) and values that are not UTF-8 (a task body is
JSON). Pure but for reading the umask.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from taskq.spool.fields import env_name

# The terminal, display and login session of the moment, and shell state.
LEFT_OUT = frozenset(
    {
        "_",
        "BASH_VERSINFO",
        "BASHOPTS",
        "COLUMNS",
        "DISPLAY",
        "EUID",
        "GPG_TTY",
        "GROUPS",
        "LINES",
        "OLDPWD",
        "PPID",
        "PWD",
        "SHELLOPTS",
        "SHLVL",
        "SSH_AGENT_PID",
        "SSH_AUTH_SOCK",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "STY",
        "TERM",
        "TERMCAP",
        "TMUX",
        "TMUX_PANE",
        "UID",
        "WAYLAND_DISPLAY",
        "WINDOW",
        "WINDOWID",
        "XAUTHORITY",
    }
)
LEFT_OUT_PREFIX = "TASKQ_"


def record(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of environ that a later process should see."""
    kept = {}
    for name, value in environ.items():
        if name in LEFT_OUT or name.startswith(LEFT_OUT_PREFIX) or not env_name(name):
            continue
        if not _utf8(value):
            continue
        kept[name] = value
    return kept


def _utf8(text: str) -> bool:
    """Tell whether text came from valid UTF-8 (os.environ keeps bad bytes as surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def umask() -> int:
    """This process's umask, read without changing it where /proc tells it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: the only other way to read it is to set it
    os.umask(mask)
    return mask
