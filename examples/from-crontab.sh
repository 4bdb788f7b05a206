#!/bin/sh
# from-crontab.sh: turn a crontab line into a taskq schedule.
#
# Usage: from-crontab.sh NAME 'CRONTAB LINE' [taskq schedule add options ...]
#
#   from-crontab.sh backup '30 2 * * * /usr/local/bin/backup --full' --tz Europe/Berlin
#
# is the same as
#
#   taskq schedule add backup --cron '30 2 * * *' --tz Europe/Berlin \
#       --cwd "$HOME" -- sh -c '/usr/local/bin/backup --full'
#
# What changes against cron: a night the host was down still runs once
# when a daemon is back (--catchup latest; give --catchup skip for cron's
# behaviour); a run still going at the next slot makes that slot skipped,
# not a second copy (--overlap skip); 02:30 on the night the clocks spring
# forward runs at 03:00, and on the night they fall back runs once; several
# hosts sharing the spool run each slot once; every run is a task with
# retries, a journal and its output under `taskq logs`.
# cron's '%' (a newline, the rest as standard input) is not converted.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 NAME 'CRONTAB LINE' [options]" >&2
    exit 2
fi
name=$1
line=$2
shift 2
case $line in
@*) nfields=1 ;;
*) nfields=5 ;;
esac
expr=$(printf '%s\n' "$line" | awk -v n="$nfields" '{ s = $1; for (i = 2; i <= n; i++) s = s " " $i; print s }')
command=$(printf '%s\n' "$line" | sed -E "s/^[[:space:]]*([^[:space:]]+[[:space:]]+){$nfields}//")
if [ -z "$command" ] || [ "$command" = "$line" ]; then
    echo "$0: no command in the crontab line" >&2
    exit 2
fi
# cron runs the line with sh -c in the user's home directory.
taskq schedule add "$name" --cron "$expr" --cwd "${HOME:-/}" "$@" -- sh -c "$command"
