#!/bin/sh
# delete-later.sh: delete files after a while, e.g. a file shared for a day.
#
# Usage: delete-later.sh DURATION FILE...
#        delete-later.sh 1d /srv/www/share/report.pdf
#
# Prints the task's id and run time; "taskq cancel ID" keeps the files after
# all, as long as the task has not started. Deleting is naturally idempotent
# ("rm -f" of a file that is gone succeeds), so a retried or repeated attempt
# is harmless. The paths are made absolute at submission, and the task runs
# in / so that it does not depend on this script's working directory.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 DURATION FILE..." >&2
    exit 2
fi
duration=$1
shift

# Rebuild the argument list with absolute paths.
for f in "$@"; do
    shift
    case $f in
    /*) set -- "$@" "$f" ;;
    *) set -- "$@" "$(pwd)/$f" ;;
    esac
done

taskq submit --json --in "$duration" --cwd / -- rm -f -- "$@"
