#!/bin/sh
# once.sh: run a command at most once to success per task, across retries.
#
# Usage (as a task):  taskq submit -- /path/to/once.sh COMMAND [ARG...]
#
# taskq may run an attempt again: after a failure, and after a lost attempt
# (its host crashed mid-run). A command that must not be repeated once it
# has succeeded (send an invoice, charge a card) can be wrapped in this
# script: it records success under the task's id (TASKQ_ID) in ONCE_DIR
# (default ~/.local/state/taskq-once) and skips the command on any later
# attempt of the same task. The marker is written after the command
# succeeds, so a crash between the two still repeats the command: make the
# command itself idempotent where that matters, e.g. by passing TASKQ_ID to
# the remote side as an idempotency key.
set -eu

: "${TASKQ_ID:?once.sh runs as a taskq task (TASKQ_ID is not set)}"
if [ $# -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi
dir=${ONCE_DIR:-${HOME:-/tmp}/.local/state/taskq-once}
mkdir -p "$dir"
marker=$dir/$TASKQ_ID

if [ -e "$marker" ]; then
    echo "once.sh: task $TASKQ_ID already succeeded (attempt $(cat "$marker")); skipping"
    exit 0
fi
"$@"
echo "$TASKQ_ATTEMPT" > "$marker.tmp"
mv "$marker.tmp" "$marker"
