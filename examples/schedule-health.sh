#!/bin/sh
# schedule-health.sh: a report on weekdays and at weekends, not on holidays,
# run now by hand, its next slot skipped, last week backfilled, its health read.
#
# Usage: schedule-health.sh [COMMAND [ARG ...]]   (default: /usr/local/bin/report)
#
# What a crontab cannot say: two expressions in one schedule (their slots
# are the union; a slot both name runs once), dates with no run, a pause
# after three failures in a row (told to the [notify] hook and by mail),
# and a run that still goes at the next slot stopped for the new one
# (--overlap replace). Then the operator's requests: `schedule run` (now,
# as the schedule: keyed, journalled, overlap honoured), `schedule skip`
# (the next slot; `resume` undoes it) and `schedule backfill` (each slot
# of the range once, however often it is asked). Re-running the script
# replaces the schedule and asks for the same backfill: no slot runs twice.
set -eu

if [ $# -eq 0 ]; then
    set -- /usr/local/bin/report
fi
taskq schedule add report \
    --cron '0 9 * * 1-5' \
    --cron '0 11 * * 0,6' \
    --except 2026-12-25 --except 2026-12-26 \
    --tz Europe/Berlin \
    --overlap replace \
    --pause-after-failures 3 \
    --replace \
    -- "$@"
taskq schedule run report
taskq schedule skip report -n 1
week_ago=$(date -u -d '7 days ago' +%Y-%m-%dT00:00:00Z)
yesterday=$(date -u -d 'yesterday' +%Y-%m-%dT23:59:59Z)
taskq schedule backfill report --from "$week_ago" --to "$yesterday"
taskq schedule show report
