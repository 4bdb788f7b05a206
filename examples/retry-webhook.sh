#!/bin/sh
# retry-webhook.sh: deliver a JSON payload to a webhook, with retries.
#
# Usage: retry-webhook.sh URL < payload.json
#
# The script submits itself as the task: taskq stores the payload (--stdin,
# up to 1 MiB) and later runs "sh retry-webhook.sh --deliver URL" with the
# payload on standard input. A failed delivery (no connection, a timeout, any
# status but 2xx) exits non-zero, and taskq retries it with exponential
# backoff until ATTEMPTS attempts have failed; the task then stays in failed/
# for an operator. taskq retries every non-zero exit alike (there is no
# "give up now" status), so a 4xx is retried like a 5xx.
#
# The receiver sees the same Idempotency-Key (TASKQ_ID) on every attempt, so
# it can drop a duplicate when an attempt was delivered but its response was
# lost, and X-Attempt (TASKQ_ATTEMPT) tells it which attempt this is.
set -eu

ATTEMPTS=5

deliver() {
    url=$1
    echo "attempt $TASKQ_ATTEMPT of $WEBHOOK_ATTEMPTS: POST $url"
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 30 \
        -H 'Content-Type: application/json' \
        -H "Idempotency-Key: $TASKQ_ID" \
        -H "X-Attempt: $TASKQ_ATTEMPT" \
        --data-binary @- "$url") || code=000
    case $code in
    2??)
        echo "delivered: HTTP $code"
        exit 0
        ;;
    esac
    if [ "$TASKQ_ATTEMPT" -ge "$WEBHOOK_ATTEMPTS" ]; then
        echo "failed: HTTP $code; that was the last attempt" >&2
    else
        echo "failed: HTTP $code; taskq will retry" >&2
    fi
    exit 1
}

if [ "${1-}" = --deliver ] && [ $# -eq 2 ]; then
    deliver "$2"
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 URL < payload.json" >&2
    exit 2
fi

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
# "--" before the command: "--deliver" would otherwise be read as an option
# of taskq submit. --timeout bounds a hung attempt; --expires gives up on a
# delivery that is a day late, retries included.
exec taskq submit \
    --queue webhooks \
    --stdin \
    --max-attempts "$ATTEMPTS" \
    --timeout 45s \
    --expires 1d \
    --cwd / \
    --env WEBHOOK_ATTEMPTS="$ATTEMPTS" \
    -- sh "$self" --deliver "$1"
