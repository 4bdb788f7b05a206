"""Run the taskq command line as ``python -m taskq``."""

from taskq.cli.main import main

main()
