#!/bin/sh
# fenced-append.sh: append a line to a file, refusing an attempt that a newer one superseded.
#
# Usage (as a task):  taskq submit -- /path/to/fenced-append.sh FILE LINE...
#
# FILE stands for any system a task writes to, and this script for the
# check that system should make: beside FILE, FILE.fences keeps for each
# task id the largest fencing token (TASKQ_FENCE) that has written, and
# under a lock a write is accepted only if its token is at least that
# large. An attempt whose daemon was paused past its lease has been
# replaced by a newer attempt with a larger token; once the newer one has
# written, the old one is refused here (exit 4), however long it was
# paused. Tokens are compared as integers: they fit in 64 bits, where awk's
# floating point would not do.
set -eu

: "${TASKQ_ID:?fenced-append.sh runs as a taskq task (TASKQ_ID is not set)}"
: "${TASKQ_FENCE:?TASKQ_FENCE is not set}"
if [ $# -lt 2 ]; then
    echo "usage: $0 FILE LINE..." >&2
    exit 2
fi
file=$1
shift
fences=$file.fences

exec 9>>"$fences.lock"
flock 9
touch "$fences"
seen=$(sed -n "s/^$TASKQ_ID //p" "$fences" | tail -n 1)
if [ -n "$seen" ] && [ "$TASKQ_FENCE" -lt "$seen" ]; then
    echo "fenced-append.sh: refused: token $TASKQ_FENCE < $seen, a newer attempt of $TASKQ_ID has written" >&2
    exit 4
fi
echo "$*" >> "$file"
echo "$TASKQ_ID $TASKQ_FENCE" >> "$fences"
