#!/bin/sh
# pipeline.sh: a three-step pipeline with dependencies, and a cleanup.
#
# Usage: pipeline.sh DIR
#
# Submits, in DIR: fetch (writes raw.txt), transform (raw.txt -> clean.txt,
# after fetch) and publish (clean.txt -> published.txt, after transform),
# and a cleanup that removes raw.txt however the steps ended. Each step runs
# only if the one before it is done (--after, with the default --after-ok);
# if one fails, the steps after it are cancelled at once with the reason
# "dependency ID failed", and the cleanup (--after-any) still runs. Each
# step mails its failure to MAILTO if that is set (--mail failure). The ids
# are printed in order; `taskq wait` on the last one tells how it went.
# Nothing waits for a step in the daemon: a step waiting for another costs
# nothing until that one ends, on whichever daemon or host runs it.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$(cd "$1" && pwd)
mail=${MAILTO:+--env MAILTO=$MAILTO}
step() {
    # $1: --after IDS or nothing; the rest: the command
    taskq submit --cwd "$dir" --mail failure $mail "$@"
}

fetch=$(step -- sh -c 'date -u +%Y-%m-%dT%H:%M:%SZ > raw.txt; echo "  Hello, Pipeline  " >> raw.txt')
transform=$(step --after "$fetch" -- sh -c 'sed "s/^ *//; s/ *$//" raw.txt > clean.txt')
publish=$(step --after "$transform" -- sh -c 'cp clean.txt published.txt.tmp && mv published.txt.tmp published.txt')
cleanup=$(taskq submit --cwd "$dir" --after "$fetch,$transform,$publish" --after-any -- rm -f raw.txt)
printf '%s\n' "$fetch" "$transform" "$publish" "$cleanup"
