"""Run the taskq command line: ``python -m taskq``, and the ``taskq`` command (`run`).

The command line is imported with Python's cyclic garbage collector
paused, and what the imports made is then frozen (`gc.freeze`): left out
of every later collection. Start-up makes tens of thousands of objects
(click's modules and taskq's: their functions, classes and tables) that
live as long as the process and hold no garbage, and the collector would
walk them all again and again, as they are made, at each full collection
after and at exit: about a tenth of a `taskq submit` (valgrind, docs/design.md
§1). The collector is on again, as it was, before any command runs.
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
