"""Where the daemon's log lines go, and how they look.

One line per event. To stderr by default: plain ("taskq[PID]: message"),
or with a syslog priority prefix ("<6>message") when stderr is systemd's
journal stream (JOURNAL_STREAM names its device and inode), since journald
adds the time and pid itself. With --log-file, to that file, with a time;
SIGHUP reopens it, so logrotate can move it away; a reopen that fails
(its directory removed) is a warning in the file still open, never the
end of the daemon. The file is never a device, a FIFO or a link (opening
a FIFO with no reader would block the daemon before its first line).
Detached without a log file, to syslog (/dev/log).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from typing import TextIO

from taskq.errors import BadInput, TaskqError
from taskq.spool import fsutil, notice
from taskq.text.quote import quote

PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}


class JournalFormatter(logging.Formatter):
    """Prefix each line with its syslog priority, as journald reads stderr."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{PRIORITIES.get(record.levelno, 2)}>{record.getMessage()}"


class LogFile(logging.StreamHandler):  # type: ignore[type-arg]
    """--log-file: appended to; reopened by name on SIGHUP, keeping the old one if that fails."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(self._open(path))

    @staticmethod
    def _open(path: str) -> TextIO:
        fd = fsutil.open_append(path, 0o666)  # as open() would: the umask decides
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")

    def reopen(self) -> str | None:
        """Open FILE afresh (logrotate moved it away); why not, if it cannot be opened."""
        try:
            stream = self._open(self.path)
        except OSError as e:
            return e.strerror or str(e)
        old = self.setStream(stream)
        if old is not None:
            old.close()
        return None


def check_log_file(path: str) -> None:
    """Open (creating) and close the log file, so that a bad one is refused before detaching."""
    try:
        os.close(fsutil.open_append(path, 0o666))
    except OSError as e:
        raise BadInput(f"--log-file {path}: {e.strerror or e}") from None


def under_journal() -> bool:
    """Tell whether stderr is the journal stream systemd set up for us."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


def one_line(record: logging.LogRecord) -> bool:
    """Make a record's message one line of printable text (text.quote), whatever it names.

    Names of spool files, and errors quoting their contents, are anyone's
    text: a name holding a newline and a fake log line must not forge one.
    """
    message = record.getMessage()
    quoted = quote(message)
    if quoted is not message or record.args:
        record.msg, record.args = quoted, None
    return True


def setup(log_file: str | None = None, syslog: bool = False) -> logging.Handler:
    """Send the taskq logger's records where they belong; return the handler."""
    handler: logging.Handler
    if log_file is not None:
        handler = LogFile(log_file)
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
    handler.addFilter(one_line)
    logger = logging.getLogger("taskq")
    notice.sink(lambda message: logger.warning("%s", message))  # readers' skips: to the log
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def fatal(e: BaseException) -> None:
    """Log the error that stops the daemon (a traceback only for a bug)."""
    logger = logging.getLogger("taskq")
    if isinstance(e, TaskqError | OSError):
        logger.error("taskq daemon stopped: %s", e)
    else:
        logger.exception("taskq daemon stopped by an internal error")


def reopen(handler: logging.Handler) -> None:
    """Reopen a log file (after SIGHUP); if it cannot be, say so and keep the old one."""
    if isinstance(handler, LogFile):
        why = handler.reopen()
        log = logging.getLogger("taskq")
        if why is None:
            log.info("SIGHUP: reopened the log file")
        else:
            log.warning(
                "SIGHUP: cannot reopen the log file %s: %s; still writing to the one open",
                handler.path,
                why,
            )
