"""taskq: a durable delayed task scheduler built on a filesystem spool.

The public face is small: the Spool (the on-disk state machine), the task
body and names, and one exception family. Everything else is private.
"""

from taskq.errors import TaskqError

__version__ = "0.1.0"

__all__ = ["TaskqError", "__version__"]
