#!/bin/sh
# from-systemd-timer.sh: a systemd timer and its service, as a taskq schedule.
#
# Usage: from-systemd-timer.sh [COMMAND [ARG ...]]   (default: /usr/local/bin/report)
#
# The timer and service this replaces:
#
#   # report.timer                       # report.service
#   [Timer]                              [Service]
#   OnCalendar=Mon..Fri *-*-* 07:30:00   Type=oneshot
#   Timezone=America/New_York            ExecStart=/usr/local/bin/report
#   Persistent=true                      TimeoutStartSec=15min
#   RandomizedDelaySec=2min
#
# Line by line: OnCalendar= becomes --cron '30 7 * * 1-5' and its
# Timezone (systemd 258's syntax, or OnCalendar=... America/New_York)
# --tz; Persistent=true is --catchup latest (run the last missed slot
# once); RandomizedDelaySec= is --jitter; TimeoutStartSec= of a oneshot is
# --timeout. A timer does not start a service that is still running;
# --overlap skip does the same and records the skipped slot. Unlike the
# timer, the schedule keeps one run per slot across several hosts sharing
# the spool, retries a failed run (--max-attempts), and runs 07:30 once on
# the nights the clocks change (systemd issue #5595).
set -eu

if [ $# -eq 0 ]; then
    set -- /usr/local/bin/report
fi
taskq schedule add report \
    --cron '30 7 * * 1-5' \
    --tz America/New_York \
    --catchup latest \
    --overlap skip \
    --jitter 2m \
    --timeout 15m \
    --max-attempts 3 \
    --replace \
    -- "$@"
