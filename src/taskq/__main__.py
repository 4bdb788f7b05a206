"""Run the taskq command line: ``python -m taskq``, and the ``taskq`` command (`run`).

The command line is imported with Python's cyclic garbage collector
paused, and what the imports made is then frozen (`gc.freeze`): left out
of every later collection. Start-up makes some 18,000 objects the
collector tracks (click's modules and taskq's: their functions, classes
and tables), which live as long as the process and hold no garbage, and
the collector would walk them again at each full collection as they are
made, after, and at exit: a tenth of a `taskq submit`'s instructions
(docs/design.md §1). The collector is on again, as it was, before any
command runs.
"""

from __future__ import annotations

import gc
from typing import NoReturn


def run() -> NoReturn:
    """Import the command line with the collector paused, then run it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from taskq.cli.main import main  # the command line, imported with the collector paused
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    main()


if __name__ == "__main__":
    run()
