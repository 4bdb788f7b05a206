"""Run the taskq command line as ``python -m taskq``."""

from taskq.cli import main

main()
