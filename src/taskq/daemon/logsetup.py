"""Where the daemon's log lines go, and how they look.

One line per event. To stderr by default: plain ("taskq[PID]: message"),
or with a syslog priority prefix ("<6>message") when stderr is systemd's
journal stream (JOURNAL_STREAM names its device and inode), since journald
adds the time and pid itself. With --log-file, to that file, with a time;
SIGHUP reopens it, so logrotate can move it away. Detached without a log
file, to syslog (/dev/log).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys

PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}


class JournalFormatter(logging.Formatter):
    """Prefix each line with its syslog priority, as journald reads stderr."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{PRIORITIES.get(record.levelno, 2)}>{record.getMessage()}"


def under_journal() -> bool:
    """Tell whether stderr is the journal stream systemd set up for us."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


def setup(log_file: str | None = None, syslog: bool = False) -> logging.Handler:
    """Send the taskq logger's records where they belong; return the handler."""
    handler: logging.Handler
    if log_file is not None:
        handler = logging.FileHandler(log_file, delay=True)
        handler.setFormatter(
            logging.Formatter("%(asctime)s taskq[%(process)d]: %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        )
    elif syslog:
        handler = logging.handlers.SysLogHandler(
            "/dev/log", logging.handlers.SysLogHandler.LOG_DAEMON
        )
        handler.setFormatter(logging.Formatter("taskq[%(process)d]: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        if under_journal():
            handler.setFormatter(JournalFormatter())
        else:
            handler.setFormatter(logging.Formatter("taskq[%(process)d]: %(message)s"))
    # No line shows a record's source file and line, thread or process
    # name, and a burst logs two records an attempt: not gathering them is
    # the logging HOWTO's advice (its "Optimization" section).
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    logger = logging.getLogger("taskq")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def fatal(e: BaseException) -> None:
    """Log the error that stops the daemon (a traceback only for a bug)."""
    from taskq.errors import TaskqError

    logger = logging.getLogger("taskq")
    if isinstance(e, TaskqError | OSError):
        logger.error("taskq daemon stopped: %s", e)
    else:
        logger.exception("taskq daemon stopped by an internal error")


def reopen(handler: logging.Handler) -> None:
    """Reopen a log file (after SIGHUP): the next line opens it afresh."""
    if isinstance(handler, logging.FileHandler):
        handler.close()  # with delay=True, emit() opens the file again by name
        logging.getLogger("taskq").info("SIGHUP: reopened the log file")
