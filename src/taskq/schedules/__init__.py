"""Recurring schedules: when slots fall, a schedule's files, occurrences made.

`slots` is pure (cron expressions and intervals in a zone); `store` owns
SPOOL/schedules/NAME/; `materialise` turns slots into ordinary tasks
(catch-up, overlap, the next occurrence made ahead); `view` is what
`taskq schedule show` reads.
"""
