#!/bin/sh
# maintenance-window.sh: schedule tomorrow's maintenance window, from cron.
#
# Usage: maintenance-window.sh [HH:MM]      (default 03:00, UTC)
#
# Meant for a daily cron job (or a systemd timer) on one or many hosts:
#
#   15 12 * * *  /usr/local/share/taskq/examples/maintenance-window.sh 03:00
#
# It submits ./maintenance.sh (in the directory given by MAINT_DIR, default
# /usr/local/lib/maintenance) to run tomorrow at HH:MM UTC. The key names
# the day, so running this script twice, or from several hosts sharing the
# spool, schedules the window once. --expires 2h: a window missed by more
# than two hours (the spool's hosts were all down) is skipped, not run in
# working hours; --timeout 1h bounds a window that hangs.
set -eu

hhmm=${1:-03:00}
case $hhmm in
[0-2][0-9]:[0-5][0-9]) ;;
*)
    echo "usage: $0 [HH:MM]" >&2
    exit 2
    ;;
esac
dir=${MAINT_DIR:-/usr/local/lib/maintenance}
day=$(date -u -d tomorrow +%Y-%m-%d 2>/dev/null || date -u -v+1d +%Y-%m-%d)

taskq submit \
    --at "${day}T${hhmm}:00Z" \
    --key "maintenance-window:$day" \
    --queue maintenance \
    --expires 2h \
    --timeout 1h \
    --max-attempts 1 \
    --cwd "$dir" \
    -- ./maintenance.sh "$day"
