#!/bin/sh
# fanout.sh: compress many files in parallel through taskq, then wait for all.
#
# Usage: fanout.sh FILE...
#
# One NDJSON line per file goes to a single `taskq submit --batch`, which
# makes the whole batch durable with a few syncs and prints the ids in input
# order; `taskq wait` then blocks until every task has ended and exits 0
# only if all succeeded. The daemon's --workers bounds how many run at
# once; put the tasks in their own queue and cap it with
# `taskq daemon --queue-limit fanout=N` to leave room for other work.
# Each task compresses to a temporary name and renames it into place, so a
# retried attempt never leaves a half-written .gz behind.
set -eu

if [ $# -eq 0 ]; then
    echo "usage: $0 FILE..." >&2
    exit 2
fi
json_string() {
    # A JSON string literal: escape backslashes and double quotes (file
    # names with control characters are refused).
    case $1 in
    *[[:cntrl:]]*)
        echo "fanout.sh: refusing a file name with control characters" >&2
        exit 2
        ;;
    esac
    printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"
}

ids=$(
    for f in "$@"; do
        case $f in /*) ;; *) f=$(pwd)/$f ;; esac
        script='gzip -c -- "$1" > "$1.gz.tmp" && mv -- "$1.gz.tmp" "$1.gz"'
        printf '{"command": ["sh", "-c", %s, "fanout", %s], "queue": "fanout"}\n' \
            "$(json_string "$script")" "$(json_string "$f")"
    done | taskq submit --batch - --max-attempts 3
)
echo "submitted $(echo "$ids" | wc -l) task(s); waiting"
# shellcheck disable=SC2086 # one id per word
exec taskq wait $ids
