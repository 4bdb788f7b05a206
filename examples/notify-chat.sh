#!/bin/sh
# notify-chat.sh: a [notify] hook that posts each ended task to a chat webhook.
#
# Usage, in SPOOL/config.toml (the daemon reads it when it starts):
#
#     [notify]
#     command = ["/path/to/notify-chat.sh", "https://chat.example.org/hooks/XYZ"]
#     on = ["failed", "cancelled"]
#     timeout = "20s"
#
# The daemon runs it once per task that ends, with one JSON event on
# standard input (its fields are listed under NOTIFICATIONS in
# taskq-spool(5)). It turns the event into one line of text and POSTs
# {"text": "..."} to the URL, the form Slack, Mattermost and Rocket.Chat
# incoming webhooks take. A failure (no connection, a status other than
# 2xx) exits non-zero; the daemon logs it with the last line of the output,
# and journals it as the task's "told" record. The daemon kills the hook
# after its timeout, so curl's own --max-time stays below it.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 WEBHOOK_URL < event.json" >&2
    exit 2
fi
url=$1
message=$(python3 -c '
import json, shlex, sys

e = json.load(sys.stdin)
how = e["state"]
if e["expired"]:
    how += " (expired)"
elif e["signal"] is not None:
    how += " (signal %d)" % e["signal"]
elif e["exit_status"] not in (None, 0):
    how += " (exit status %d)" % e["exit_status"]
elif e["reason"] and e["state"] != "done":
    how += " (%s)" % e["reason"]
where = " on %s" % e["host"] if e["host"] else ""
tries = " after %d attempt(s)" % e["attempts"] if e["attempts"] else ""
text = "taskq: %s %s%s%s: %s\nlogs: %s" % (
    e["id"], how, where, tries, shlex.join(e["command"] or ["?"]), e["log_dir"])
print(json.dumps({"text": text}))
')
code=$(printf '%s' "$message" | curl -sS -o /dev/null -w '%{http_code}' --max-time 15 \
    -H 'Content-Type: application/json' --data-binary @- "$url") || code=000
case $code in
2??) exit 0 ;;
esac
echo "chat webhook answered HTTP $code" >&2
exit 1
