#!/bin/sh
# remind.sh: a reminder, like at(1)'s classic use.
#
# Usage: remind.sh WHEN|DURATION MESSAGE...
#        remind.sh 15m "tea is ready"
#        remind.sh 2026-12-24T17:00:00+01:00 "call home"
#
# At the time, the message is written to every terminal of this user with
# write(1) when possible, and always appended to REMIND_FILE (default
# ~/reminders), so it is not lost when nobody is logged in. A reminder more
# than an hour late is dropped (--expires 1h): it would no longer help.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 WHEN|DURATION MESSAGE..." >&2
    exit 2
fi
when=$1
shift
case $when in
*[!0-9smhdw.]*) timing="--at" ;; # a time: 2026-12-24T17:00Z, @EPOCH, now
*) timing="--in" ;;              # a duration: 90, 15m, 1h30m
esac
file=${REMIND_FILE:-$HOME/reminders}

taskq submit "$timing" "$when" --expires 1h --max-attempts 2 \
    --env REMIND_FILE="$file" --env MESSAGE="$*" --env LOGIN="$(id -un)" \
    -- sh -c '
        line="reminder ($TASKQ_RUN_AT): $MESSAGE"
        printf "%s\n" "$line" >> "$REMIND_FILE"
        printf "%s\n" "$line"
        command -v write >/dev/null 2>&1 && printf "%s\n" "$line" | write "$LOGIN" 2>/dev/null
        exit 0
    '
