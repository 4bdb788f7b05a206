#!/bin/sh
# backup-at-night.sh: schedule a backup of a directory for the next 02:00 UTC.
#
# Usage: backup-at-night.sh SOURCE_DIR BACKUP_DIR
#
# Run it as often as you like (from a login script, cron, a deploy hook):
# the --key names the night and the directories, so every run after the
# first for the same night prints the existing task's id and creates nothing.
#
# The task is idempotent as well: it writes the archive under a temporary
# name and renames it into place as its last step, so an attempt that is cut
# short (a timeout, a crash) never leaves a truncated archive that looks
# complete, and a retry whose archive already exists does nothing.
#
# The night is fixed at submission (NIGHT) rather than taken from the clock
# when the task runs: a retry at 02:20, or a run after the machine was down,
# still names the archive after the night it is for. (TASKQ_RUN_AT, the run
# time as submitted, would serve too; TASKQ_DUE_AT moves with each retry.)
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 SOURCE_DIR BACKUP_DIR" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
dest=$(cd "$2" && pwd)

now=$(date -u +%s)
at=$((now - now % 86400 + 2 * 3600)) # 02:00 UTC today...
if [ "$at" -le "$now" ]; then
    at=$((at + 86400)) # ...or tomorrow, if that has passed
fi
# GNU date, then BSD date.
night=$(date -u -d "@$at" +%Y-%m-%d 2>/dev/null || date -u -r "$at" +%Y-%m-%d)

# --expires 12h: after a long outage, skip last night's backup rather than
# run it in the middle of the working day; tonight's will follow.
# --cwd /: do not depend on the directory this script happens to run in.
exec taskq submit \
    --at "@$at" \
    --key "backup-at-night:$src:$dest:$night" \
    --timeout 2h \
    --max-attempts 3 \
    --expires 12h \
    --cwd / \
    --env SRC="$src" \
    --env DEST="$dest" \
    --env NIGHT="$night" \
    -- sh -c '
        set -e
        final="$DEST/backup-$NIGHT.tar.gz"
        if [ -e "$final" ]; then
            echo "attempt $TASKQ_ATTEMPT: $final exists already"
            exit 0
        fi
        tmp="$final.tmp-$TASKQ_ID-$TASKQ_ATTEMPT"
        trap '\''rm -f "$tmp"'\'' EXIT
        tar -czf "$tmp" -C "$SRC" .
        mv "$tmp" "$final"
        echo "attempt $TASKQ_ATTEMPT: wrote $final"
    '
