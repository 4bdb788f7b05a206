#!/bin/sh
# debounce.sh: run a command once, DELAY after the last of a burst of requests.
#
# Usage: debounce.sh NAME DELAY COMMAND [ARG ...]
#   e.g. from a hook on every push:  debounce.sh docs 30s make -C /srv/docs
#   PRIORITY=N (-1000 to 1000) starts it before the other due tasks of its queue.
#
# Each call submits COMMAND to run in DELAY with the key debounce:NAME.
# --on-key replace: a task of the key still waiting is cancelled and this
# one takes its place (atomically; its journal names the replacement), so
# ten pushes in a row run the command once, DELAY after the last.
# --key-for DELAY: the key is held only until the task is due, so a request
# that comes while the command runs (or after) makes a new run rather than
# being answered with the one that started before it.
# --mutex NAME: that new run waits for the one still going, on any host.
# The id printed is the task that holds the key: the one that will run.
set -eu

if [ $# -lt 3 ]; then
    echo "usage: $0 NAME DELAY COMMAND [ARG ...]" >&2
    exit 2
fi
name=$1 delay=$2
shift 2
exec taskq submit --key "debounce:$name" --key-for "$delay" --on-key replace \
    --in "$delay" --mutex "debounce-$name" ${PRIORITY:+--priority "$PRIORITY"} -- "$@"
