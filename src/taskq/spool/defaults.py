"""Where the spool is and what this host is called: defaults from the environment.

The spool is chosen as: --spool DIR, else $TASKQ_SPOOL, else /var/spool/taskq
for root, else ${XDG_STATE_HOME:-~/.local/state}/taskq.
"""

from __future__ import annotations

import os
import re

SYSTEM_SPOOL = "/var/spool/taskq"


def default_spool() -> str:
    """The spool used when neither --spool nor $TASKQ_SPOOL names one."""
    if os.geteuid() == 0:
        return SYSTEM_SPOOL
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(state, "taskq")


def default_host_id() -> str:
    """This host's name, made safe for a claim name (letters, digits, . _ -)."""
    import socket  # the daemon's default: off submit's start-up

    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip("._-")
    return name[:64] or "localhost"
